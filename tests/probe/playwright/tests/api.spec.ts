import { test, expect } from "./cvdiag";

test("the chat answers", async ({ request }) => {
  const answer = await request.get("/api/chat?message=hi");
  expect(await answer.json()).toEqual({ answer: "HI" });
});

test("a slow LLM call outlives the client's timeout", async ({ request }, testInfo) => {
  // The retry's call outlasts the run: its last lines are written while Playwright stops the
  // backend, and only a graceful stop keeps them.
  const seconds = testInfo.retry ? 10 : 4;
  const answer = await request.post(`/api/slow?seconds=${seconds}`, { data: { message: "hi" }, timeout: 2000 });
  expect(answer.ok()).toBe(true);
});

test.describe("without a timeout of its own", () => {
  test.describe.configure({ retries: 0 });

  test("a call outlives the test's own timeout", async ({ request }) => {
    test.setTimeout(1500);
    await request.post("/api/slow?seconds=3", { data: { message: "hi" } });
  });
});

test.describe("once only", () => {
  test.describe.configure({ retries: 0 });

  test("the backend fails", async ({ request }) => {
    const answer = await request.get("/api/fail");
    expect(answer.ok()).toBe(true);
  });

  test("the worker dies mid-request", async ({ request }) => {
    // The runner's own process killed while its call is outstanding (a runner that crashes):
    // its probe writes no exit.
    setTimeout(() => process.kill(process.pid, "SIGKILL"), 500);
    await request.post("/api/slow?seconds=2", { data: { message: "hi" } });
  });
});
