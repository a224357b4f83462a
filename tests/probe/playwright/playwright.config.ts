// playwright.config.ts: the backend started by Playwright, its stdout kept, stopped gracefully.
import { rmSync } from "node:fs";
import { defineConfig } from "@playwright/test";

const port = Number(process.env.BACKEND_PORT ?? 8000);
process.env.CVDIAG_PROBE_LOG ??= "artifacts/cvdiag-probe.log";
if (process.env.TEST_WORKER_INDEX === undefined) {
  rmSync(process.env.CVDIAG_PROBE_LOG, { force: true }); // the runner starts each run's log afresh
}

export default defineConfig({
  testDir: "tests",
  retries: 1,
  reporter: [["list"], ["junit", { outputFile: "artifacts/results.xml", includeRetries: true }]],
  use: { baseURL: `http://127.0.0.1:${port}` },
  webServer: {
    // The backend's stdout is its story: one file per run (">" starts it afresh).
    command: `mkdir -p artifacts && uvicorn app:app --port ${port} > artifacts/backend.log`,
    port,
    env: { CVDIAG_BACKEND_EMITTER: "1", CVDIAG_VERBOSE: "1" },
    // SIGTERM, then wait for the backend to end: it writes a request's last lines after its
    // client has gone (a client that timed out left long before), and on SIGTERM what is queued.
    gracefulShutdown: { signal: "SIGTERM", timeout: 20_000 },
  },
});
