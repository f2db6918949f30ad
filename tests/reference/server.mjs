// The Durable Streams reference server (npm `@durable-streams/server`) with its file store, for
// the side-by-side benchmark (scripts/bench-reference). Usage: node server.mjs DATA_DIR
// Listens on an ephemeral loopback port and prints `listening on http://127.0.0.1:PORT`.
import { DurableStreamTestServer } from "@durable-streams/server"

const dataDir = process.argv[2]
if (!dataDir) {
  console.error("usage: node server.mjs DATA_DIR")
  process.exit(2)
}

const server = new DurableStreamTestServer({ port: 0, host: "127.0.0.1", dataDir })
const url = await server.start()
console.log(`listening on ${url}`)

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    // Bounded: exit even if a connection holds the server open.
    setTimeout(() => process.exit(0), 2000).unref()
    server.stop().then(() => process.exit(0))
  })
}
