import { test, expect } from "./cvdiag";

test.use({ cvdiagTokenSelector: "#answer" });
test.describe.configure({ retries: 0 });

test("the page streams its answer", async ({ page }) => {
  await page.goto("/page/stream");
  await expect(page.locator("#answer")).toHaveText("one two three four five six");
  await expect(page.locator("#status")).toHaveText("stream ended");
});

test("the page renders the streamed answer", async ({ page }) => {
  await page.goto("/page/broken");
  await expect(page.locator("#status")).toHaveText("stream ended");
  await expect(page.locator("#answer")).not.toBeEmpty({ timeout: 500 });
});

test("the page leaves once it has what it needs", async ({ page }) => {
  await page.goto("/page/long");
  await expect(page.locator("#answer")).toContainText("one");
  await page.close();
});
