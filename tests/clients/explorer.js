// Loads the GraphQL explorer in headless Chromium, runs its default query
// and prints the response pane, then opens the documentation panel (which
// needs GraphiQL's start-up introspection query to have passed) and prints
// the Query type's fields; keeps a screenshot of each.
// Usage: node explorer.js URL SCREENSHOT   (NODE_PATH must hold playwright-core)
const { chromium } = require('playwright-core');

(async () => {
  const [url, screenshot] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.HMG_CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const failures = [];
    page.on('requestfailed', (r) => failures.push(`${r.url()}: ${r.failure() && r.failure().errorText}`));
    page.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
    await page.goto(url, { waitUntil: 'networkidle' });
    await page.waitForSelector('.graphiql-execute-button', { timeout: 30000 });
    await page.click('.graphiql-execute-button');
    await page.waitForFunction(() => {
      const pane = document.querySelector('.graphiql-response');
      return pane && pane.innerText.includes('"atoms"');
    }, null, { timeout: 30000 });
    const response = await page.innerText('.graphiql-response');
    await page.screenshot({ path: screenshot, fullPage: true });
    // The docs panel: root types, then the query type's fields.
    await page.click('button[aria-label="Show Documentation Explorer"]');
    await page.waitForFunction(() => {
      const docs = document.querySelector('.graphiql-doc-explorer');
      return docs && docs.innerText.includes('QueryRoot');
    }, null, { timeout: 30000 });
    await page.click('.graphiql-doc-explorer a:has-text("QueryRoot")');
    await page.waitForFunction(() => {
      const docs = document.querySelector('.graphiql-doc-explorer');
      return docs && docs.innerText.includes('recall') && docs.innerText.includes('entities');
    }, null, { timeout: 30000 });
    const fields = await page.$$eval('.graphiql-doc-explorer-field-name', (nodes) => nodes.map((n) => n.textContent.trim()));
    await page.screenshot({ path: screenshot.replace(/\.png$/, '-docs.png'), fullPage: true });
    if (failures.length) {
      console.error(failures.join('\n'));
      process.exit(1);
    }
    console.log(response);
    console.log(`docs fields: ${fields.join(', ')}`);
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
