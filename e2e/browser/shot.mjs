// Opens one run of the MLflow UI in headless Chromium, goes to its System
// metrics tab, waits until the charts of the expected metrics are drawn,
// checks their names are on the page and saves a screenshot.
//
//   node shot.mjs --url http://127.0.0.1:5000 --experiment 1 --run <run_id> \
//     --expect container_memory_working_set_megabytes,node_memory_usage_megabytes \
//     --out shot.png [--chromium /usr/bin/chromium] [--timeout-ms 90000]
//
// Exit status: 0 when every expected name is shown, 1 otherwise (a screenshot
// of what the page showed is still written, to <out> with .failed.png).
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string' },
    experiment: { type: 'string' },
    run: { type: 'string' },
    expect: { type: 'string' },
    out: { type: 'string' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
    'timeout-ms': { type: 'string', default: '90000' },
  },
});
for (const k of ['url', 'experiment', 'run', 'expect', 'out']) {
  if (!opt[k]) {
    console.error(`shot.mjs: --${k} is required`);
    process.exit(2);
  }
}
const expected = opt.expect.split(',').filter(Boolean);
const timeout = Number(opt['timeout-ms']);
const runURL = `${opt.url.replace(/\/$/, '')}/#/experiments/${opt.experiment}/runs/${opt.run}`;

// A fresh profile per run: no cached UI state, no first-run dialogs.
const profile = mkdtempSync(join(tmpdir(), 'bridge-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: opt.chromium,
  headless: true,
  viewport: { width: 1600, height: 1100 },
  // Offline, reproducible browser: nothing but the test server is reachable.
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});

// Best effort, for a readable screenshot (the check does not depend on it):
// the classic-ML layout, and the assistant panel that opens on a first
// visit kept closed so the charts get the width. Keys as the UI stores them.
await context.addInitScript(() => {
  try {
    localStorage.setItem('mlflow.workflowType_v1', '"machine_learning"');
    localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
    localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
  } catch {
    // about:blank has no storage
  }
});

let failed = null;
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(timeout);
try {
  await page.goto(runURL, { waitUntil: 'domcontentloaded' });
  // The run page's tabs; the UI names this one "System metrics".
  const tab = page.getByRole('tab', { name: /system metrics/i })
    .or(page.getByRole('link', { name: /system metrics/i }))
    .or(page.getByText(/^system metrics$/i));
  await tab.first().click();
  await page.waitForURL(/system-metrics/);

  // A chart is drawn when its card shows the metric's name and a plot.
  for (const name of expected) {
    await page.getByText(name, { exact: false }).first().waitFor({ state: 'visible' });
  }
  // Each chart is a plotly plot; wait until there is one per expected name
  // and they have drawn their lines (the UI polls, so the network never
  // goes idle).
  await page.waitForFunction(
    (n) => document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length >= n,
    expected.length,
  );
  await page.waitForTimeout(1000); // let the last chart finish its transition

  const text = await page.locator('body').innerText();
  const missing = expected.filter((n) => !text.includes(n));
  if (missing.length > 0) {
    failed = `not on the System metrics tab: ${missing.join(', ')}`;
  }
} catch (err) {
  failed = String(err);
}

const out = failed ? opt.out.replace(/\.png$/, '') + '.failed.png' : opt.out;
await page.screenshot({ path: out, fullPage: true });
await context.close();
rmSync(profile, { recursive: true, force: true });

if (failed) {
  console.error(`shot.mjs: ${runURL}: ${failed} (screenshot: ${out})`);
  process.exit(1);
}
console.log(`shot.mjs: ${expected.length} system metric charts shown at ${runURL}; screenshot ${out}`);
