// Screenshots of a nested job in MLflow's UI (bench/jobsize_ui.sh): the
// experiment's runs table (the job's run, then expanded to its node runs),
// the experiment's chart view, the job's run (overview, its report
// unfolded, System metrics) and one node's run (System metrics). Uses
// e2e/browser's playwright-core and Debian's chromium, offline.
//
//   node bench/jobsize_ui.mjs --url http://127.0.0.1:5000 --job job.json --out DIR
import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const require = createRequire(new URL('../e2e/browser/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string' },
    job: { type: 'string' },
    out: { type: 'string' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
  },
});
const job = JSON.parse(readFileSync(opt.job, 'utf8'));
const base = opt.url.replace(/\/$/, '');
const exp = job.experiment;
const profile = mkdtempSync(join(tmpdir(), 'bridge-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: opt.chromium,
  headless: true,
  viewport: { width: 1600, height: 1100 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
await context.addInitScript(() => {
  try {
    localStorage.setItem('mlflow.workflowType_v1', '"machine_learning"');
    localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
    localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
  } catch {
    // about:blank has no storage
  }
});
const page = context.pages()[0] ?? (await context.newPage());
const settle = async () => {
  await page.waitForLoadState('networkidle').catch(() => {});
  await page.waitForTimeout(2500);
};
const shot = async (name) => {
  const path = join(opt.out, name);
  await page.screenshot({ path, fullPage: false });
  console.log(path);
};
let failed = false;
try {
  await page.goto(`${base}/#/experiments/${exp}/runs`);
  await page.getByText('train.py').first().waitFor({ timeout: 90000 });
  await settle();
  await shot('1-experiment-runs.png');
  // The parent row's expander: the button next to its name.
  const row = page.locator('[role="row"]', { hasText: 'train.py' }).first();
  const expander = row.locator('button').first();
  await expander.click({ timeout: 10000 }).catch((e) => console.error('no expander:', e.message));
  await settle();
  await shot('2-experiment-runs-expanded.png');
  await page.goto(`${base}/#/experiments/${exp}/runs?compareRunsMode=CHART`);
  await settle();
  await page.waitForTimeout(3000);
  await shot('3-experiment-chart-view.png');
  // The node runs grouped by their job (tag bridge.job): one line, the
  // mean, with a min-max band, drawn by MLflow itself.
  await page.getByRole('button', { name: /Group by/ }).first().click({ timeout: 10000 });
  await page.waitForTimeout(1000);
  await shot('3b-group-by-menu.png');
  await page.getByText('bridge.job', { exact: true }).first().click({ timeout: 10000 });
  await page.keyboard.press('Escape');
  await settle();
  await page.waitForTimeout(3000);
  await shot('3c-experiment-chart-view-grouped.png');
  await page.goto(`${base}/#/experiments/${exp}/runs/${job.parent}`);
  await page.getByText('train.py').first().waitFor({ timeout: 90000 });
  await settle();
  await shot('4-job-run-overview.png');
  // The job's report in the run's description, unfolded.
  await page.getByText('Show more', { exact: true }).first().click({ timeout: 10000 })
    .catch((e) => console.error('no "Show more":', e.message));
  await settle();
  await shot('4b-job-run-report.png');
  await page.goto(`${base}/#/experiments/${exp}/runs/${job.parent}/system-metrics`);
  await settle();
  await page.waitForTimeout(3000);
  await shot('5-job-run-system-metrics.png');
  const child = job.children['node-11'];
  await page.goto(`${base}/#/experiments/${exp}/runs/${child}/system-metrics`);
  await settle();
  await page.waitForTimeout(3000);
  await shot('6-node-11-system-metrics.png');
  await page.goto(`${base}/#/experiments/${exp}/runs/${child}`);
  await settle();
  await shot('7-node-11-overview.png');
} catch (e) {
  failed = true;
  console.error(e.message);
  await shot('failed.png');
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
