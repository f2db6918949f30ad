import { defineConfig } from "vitest/config";

// The client is served by moord from web/dist (embedded at build time); `npm run dev` proxies the
// API to a local moord.
export default defineConfig({
  base: "/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    chunkSizeWarningLimit: 800,
  },
  server: {
    proxy: { "/api": "http://127.0.0.1:7070", "/app-config.json": "http://127.0.0.1:7070" },
  },
  test: {
    include: ["tests/**/*.test.ts"],
    environment: "node",
  },
});
