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
