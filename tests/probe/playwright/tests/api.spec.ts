import { test, expect } from "./cvdiag";

test("the chat answers", async ({ request }) => {
  const answer = await request.get("/api/chat?message=hi");
  expect(await answer.json()).toEqual({ answer: "HI" });
});

test("a slow LLM call outlives the client's timeout", async ({ request }) => {
  const answer = await request.post("/api/slow", { data: { message: "hi" }, timeout: 2000 });
  expect(answer.ok()).toBe(true);
});
