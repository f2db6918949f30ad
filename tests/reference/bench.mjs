// One measurement against the Durable Streams reference server, driven by its own client
// (npm `@durable-streams/client`), for the side-by-side benchmark (scripts/bench-reference).
//
//   node bench.mjs --url http://127.0.0.1:PORT --workload NAME [options]
//
// Workloads (each prints one line `result <name> <value> <unit>`):
//   batch100      --entries N   appends of 100 entries (one POST each), each awaited: entries/s
//                               (the writing workloads add an `info` line with the CPU time per
//                               entry of the server process --pid, if given)
//   batch100x5    --entries N   the same, 5 POSTs in flight: entries/s
//   defaults      --entries N   the client's recommended writer, IdempotentProducer with its
//                               defaults (1 MB batches, 5 in flight, 5 ms linger): entries/s
//   single        --entries N   one entry per append, each awaited: entries/s
//   catchup-sse   --entries N   stream({ live: "sse" }) from the start of a log of N entries: s
//   catchup-paged --entries N   stream({ live: false }) (offset reads until up to date): s
//   idle-sse      --conns N --pid P   RSS of the server process P per idle SSE reader: KiB
//   live          --readers R --rate E --secs S --pid P   E entries/s for S s, R SSE readers:
//                               p99 ms (and, on an `info` line, p50 and the CPU time of the
//                               server process P and of this client)
//
// Every entry is a JSON value of 200 bytes whose text starts with its send time (µs, 16
// characters). Every wait is bounded; the whole process exits after --deadline seconds.
import { readFileSync } from "node:fs"
import { performance } from "node:perf_hooks"
import { DurableStream, IdempotentProducer, stream } from "@durable-streams/client"

const args = process.argv.slice(2)
const opt = (name, def) => {
  const i = args.indexOf(name)
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def
}
const num = (name, def) => {
  const v = Number(opt(name, def))
  if (!Number.isFinite(v) || v < 1) fail(`${name} takes a whole number`)
  return Math.floor(v)
}
function fail(msg) {
  console.error(`bench.mjs: ${msg}`)
  process.exit(1)
}

const base = opt("--url") ?? fail("--url is required")
const workload = opt("--workload") ?? fail("--workload is required")
const deadline = num("--deadline", 600)
setTimeout(() => fail(`gave up after ${deadline}s`), deadline * 1000).unref()

const JSON_TYPE = "application/json"
const nowUs = () => Math.round(performance.now() * 1000)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// A 200-byte JSON entry (the size of a Mooring agent.output entry as stored).
const HEAD = '{"kind":"agent.output","payload":{"stream":"stdout","text":"'
const TAIL = '"}}'
const PAD = "x".repeat(200 - HEAD.length - TAIL.length - 17)
const entry = (sentUs) => `${HEAD}${String(sentUs).padStart(16)} ${PAD}${TAIL}`
if (entry(0).length !== 200) fail("entry is not 200 bytes")
const sentAt = (item) => Number(item?.payload?.text?.slice(0, 16))

let streams = 0
async function create() {
  streams += 1
  const url = `${base}/bench/${process.pid}-${Date.now()}-${streams}`
  await DurableStream.create({ url, contentType: JSON_TYPE })
  return url
}

// `total` entries, `batch` a POST (the entries joined into the POST's JSON array), `inFlight`
// POSTs at a time; every POST awaited before the count is done.
async function appendBatches(url, total, batch, inFlight) {
  const handle = new DurableStream({ url, contentType: JSON_TYPE, batching: false })
  const body = (n) => Array.from({ length: n }, () => entry(0)).join(",")
  let sent = 0
  const running = new Set()
  while (sent < total) {
    while (sent < total && running.size < inFlight) {
      const n = Math.min(batch, total - sent)
      const p = handle.append(body(n)).finally(() => running.delete(p))
      running.add(p)
      sent += n
    }
    await Promise.race(running)
  }
  await Promise.all(running)
}

// Entries per second of `fn` writing `total` entries; with --pid, an `info` line gives the
// server's CPU time per entry.
async function rate(total, fn) {
  const pid = opt("--pid")
  const cpu = pid && cpuSecs(pid)
  const start = performance.now()
  await fn()
  const secs = (performance.now() - start) / 1000
  if (pid) console.log(`info server CPU ${(((cpuSecs(pid) - cpu) * 1e6) / total).toFixed(1)} us/entry`)
  return total / secs
}

// A log of `total` entries, written in appends of 1,000 (not timed).
async function filled(total) {
  const url = await create()
  await appendBatches(url, total, 1000, 1)
  return url
}

// A fetch that counts the SSE responses it has received, so a caller knows when its readers are
// attached.
function countingFetch() {
  const counter = { sse: 0 }
  counter.fetch = async (input, init) => {
    const res = await fetch(input, init)
    if (String(input).includes("live=sse") && res.ok) counter.sse += 1
    return res
  }
  return counter
}

async function until(what, cond, secs) {
  const end = performance.now() + secs * 1000
  while (!cond()) {
    if (performance.now() > end) fail(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

function rssKib(pid) {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith("VmRSS:"))
  return Number(line.split(/\s+/)[1])
}

// CPU time (user + system) process `pid` has used, in seconds.
function cpuSecs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(f[11]) + Number(f[12])) / 100
}

const workloads = {
  async batch100() {
    const total = num("--entries", 100000)
    const url = await create()
    return ["entries/s", await rate(total, () => appendBatches(url, total, 100, 1))]
  },
  async batch100x5() {
    const total = num("--entries", 100000)
    const url = await create()
    return ["entries/s", await rate(total, () => appendBatches(url, total, 100, 5))]
  },
  async defaults() {
    const total = num("--entries", 200000)
    const url = await create()
    const handle = new DurableStream({ url, contentType: JSON_TYPE })
    let failed = null
    const producer = new IdempotentProducer(handle, `bench-${process.pid}`, {
      autoClaim: true,
      onError: (e) => (failed = e),
    })
    const r = await rate(total, async () => {
      for (let i = 0; i < total; i++) producer.append(entry(0))
      await producer.flush()
    })
    if (failed) fail(`producer: ${failed}`)
    await producer.detach()
    return ["entries/s", r]
  },
  async single() {
    const total = num("--entries", 2000)
    const url = await create()
    const handle = new DurableStream({ url, contentType: JSON_TYPE })
    return [
      "entries/s",
      await rate(total, async () => {
        for (let i = 0; i < total; i++) await handle.append(entry(0))
      }),
    ]
  },
  async "catchup-sse"() {
    const total = num("--entries", 100000)
    const url = await filled(total)
    const start = performance.now()
    const res = await stream({ url, offset: "-1", live: "sse" })
    let seen = 0
    await new Promise((resolve, reject) => {
      res.subscribeJson((batch) => {
        seen += batch.items.length
        if (seen >= total) resolve()
      })
      res.closed.catch(reject)
      setTimeout(() => reject(new Error(`read ${seen} of ${total}`)), 120000).unref()
    })
    const secs = (performance.now() - start) / 1000
    res.cancel()
    return ["s", secs]
  },
  async "catchup-paged"() {
    const total = num("--entries", 100000)
    const url = await filled(total)
    const start = performance.now()
    const res = await stream({ url, offset: "-1", live: false })
    const items = await res.json()
    const secs = (performance.now() - start) / 1000
    if (items.length !== total) fail(`read ${items.length} of ${total}`)
    return ["s", secs]
  },
  async "idle-sse"() {
    const conns = num("--conns", 1000)
    const pid = num("--pid")
    const url = await filled(1)
    const counter = countingFetch()
    const open = () => {
      const p = stream({ url, offset: "now", live: "sse", fetch: counter.fetch })
      return p.then((res) => {
        res.subscribeJson(() => {})
        return res
      })
    }
    // One reader first warms the server's code paths and the allocator.
    const readers = [await open()]
    await until("the first reader", () => counter.sse >= 1, 30)
    await sleep(500)
    const before = rssKib(pid)
    for (let i = 0; i < conns; i++) readers.push(await open())
    await until(`${conns} readers`, () => counter.sse >= conns + 1, 120)
    await sleep(1000)
    const after = rssKib(pid)
    for (const r of readers) r.cancel()
    return ["KiB", (after - before) / conns]
  },
  async live() {
    const readers = num("--readers", 1)
    const perSec = num("--rate", 1000)
    const secs = num("--secs", 5)
    const total = perSec * secs
    const url = await filled(1)
    const counter = countingFetch()
    const latencies = []
    const done = []
    const subs = []
    for (let i = 0; i < readers; i++) {
      const res = await stream({ url, offset: "now", live: "sse", fetch: counter.fetch })
      subs.push(res)
      done.push(
        new Promise((resolve, reject) => {
          let seen = 0
          res.subscribeJson((batch) => {
            const now = nowUs()
            for (const item of batch.items) {
              const sent = sentAt(item)
              if (sent > 0) {
                latencies.push(now - sent)
                seen += 1
              }
            }
            if (seen >= total) resolve()
          })
          res.closed.catch(reject)
        }),
      )
    }
    await until(`${readers} readers`, () => counter.sse >= readers, 60)
    const cpuBefore = [cpuSecs(num("--pid")), process.cpuUsage()]
    // A tick every 10 ms, its entries appended without waiting: the client's default batching
    // sends one POST at a time and gathers what was appended meanwhile into the next.
    const handle = new DurableStream({ url, contentType: JSON_TYPE })
    const perTick = Math.max(1, Math.floor(perSec / 100))
    const start = performance.now()
    const posts = []
    let sent = 0
    for (let tick = 0; sent < total; tick++) {
      const wait = start + tick * 10 - performance.now()
      if (wait > 0) await sleep(wait)
      if (performance.now() - start > secs * 3000) fail(`sent ${sent} of ${total} in ${secs * 3}s`)
      const n = Math.min(perTick, total - sent)
      const t = nowUs()
      for (let i = 0; i < n; i++) posts.push(handle.append(entry(t)))
      sent += n
    }
    await Promise.all(posts)
    const timeout = new Promise((_, reject) =>
      setTimeout(() => reject(new Error("readers did not get every entry")), 120000).unref(),
    )
    await Promise.race([Promise.all(done), timeout])
    for (const s of subs) s.cancel()
    latencies.sort((a, b) => a - b)
    const p = (q) => latencies[Math.round((latencies.length - 1) * q)] / 1000
    const serverCpu = cpuSecs(num("--pid")) - cpuBefore[0]
    const own = process.cpuUsage(cpuBefore[1])
    const clientCpu = (own.user + own.system) / 1e6
    console.log(
      `info p50 ${p(0.5).toFixed(1)} ms, ${latencies.length} deliveries, CPU: server ${serverCpu.toFixed(1)} s, client ${clientCpu.toFixed(1)} s`,
    )
    return ["ms", p(0.99)]
  },
}

const run = workloads[workload] ?? fail(`unknown workload ${workload}`)
const [unit, value] = await run()
console.log(`result ${workload} ${value.toFixed(3)} ${unit}`)
process.exit(0)
