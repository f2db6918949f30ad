# moord and moor in a small runtime image. Build: docker build -t mooring .

# The web client, which moord embeds at compile time (server/build.rs reads web/dist).
FROM node:20-bookworm AS web
WORKDIR /src/web
COPY web/ ./
RUN npm ci --no-audit --no-fund --loglevel=error && npm run build

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
COPY --from=web /src/web/dist web/dist
RUN cargo build --release --locked -p moor-server -p moor-bridge --bin moord --bin moor

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data moor \
    && mkdir -p /data && chown moor /data
COPY --from=build /src/target/release/moord /src/target/release/moor /usr/local/bin/
USER moor
WORKDIR /data
ENV MOOR_LISTEN=0.0.0.0:7070 MOOR_DATA_DIR=/data
EXPOSE 7070
# /readyz: 200 once the store answers within 3 s, its schema is current and (Postgres) the node
# listens to the other nodes; 503 with a JSON reason otherwise (curl -f fails on it).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s CMD curl -fsS --max-time 4 http://127.0.0.1:7070/readyz || exit 1
ENTRYPOINT ["moord"]
