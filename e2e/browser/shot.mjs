// Opens one run of the MLflow UI in headless Chromium, goes to its System
// metrics tab, waits until the charts of the expected metrics are drawn,
// checks their names are on the page and saves a screenshot; then checks
// that the Model metrics tab shows the training script's own metrics.
// With --artifact instead, it opens the run's Artifacts tab, selects that
// file, waits until each --artifact-expect text is shown in its preview
// and saves a screenshot of it. With --overview-expect instead, it stays on
// the run's Overview page, waits until each text is shown there (the run's
// description, mlflow.note.content, rendered), checks that no
// --overview-absent text is, and saves a screenshot.
//
//   node shot.mjs --url http://127.0.0.1:5000 --experiment 1 --run <run_id> \
//     --expect container_memory_working_set_megabytes,node_memory_usage_megabytes \
//     [--model-expect loss,accuracy] \
//     --out shot.png [--chromium /usr/bin/chromium] [--timeout-ms 90000]
//   node shot.mjs --url ... --experiment 1 --run <run_id> \
//     --artifact bridge-report.md --artifact-expect 'first failure,node-1' --out shot.png
//   node shot.mjs --url ... --experiment 1 --run <run_id> \
//     --overview-expect 'Memory:,next run' [--overview-absent 'bridge: begin'] --out shot.png
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
    'model-expect': { type: 'string', default: '' },
    artifact: { type: 'string', default: '' },
    'artifact-expect': { type: 'string', default: '' },
    'overview-expect': { type: 'string', default: '' },
    'overview-absent': { type: 'string', default: '' },
    out: { type: 'string' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
    'timeout-ms': { type: 'string', default: '90000' },
  },
});
const overview = opt['overview-expect'].split(',').filter(Boolean);
for (const k of ['url', 'experiment', 'run', opt.artifact ? 'artifact' : overview.length > 0 ? 'overview-expect' : 'expect', 'out']) {
  if (!opt[k]) {
    console.error(`shot.mjs: --${k} is required`);
    process.exit(2);
  }
}
const expected = (opt.expect ?? '').split(',').filter(Boolean);
const artifactExpected = opt['artifact-expect'].split(',').filter(Boolean);
const modelExpected = opt['model-expect'].split(',').filter(Boolean);
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

// openTab clicks one of the run page's tabs ("System metrics", "Model
// metrics") and waits for its route.
async function openTab(label, route) {
  const re = new RegExp(`^${label}$`, 'i');
  const tab = page.getByRole('tab', { name: re })
    .or(page.getByRole('link', { name: re }))
    .or(page.getByText(re));
  await tab.first().click();
  await page.waitForURL(route);
}

// waitForTitles waits until a chart titled exactly each name is shown (the
// legend under a chart reads "<run> (system/<name>)", so an exact match is
// the title) and has drawn its line: each chart is a plotly plot, and the UI
// polls, so the network never goes idle.
async function waitForTitles(names) {
  for (const name of names) {
    await page.getByText(name, { exact: true }).first().waitFor({ state: 'visible' });
  }
  await page.waitForFunction(
    (n) => document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length >= n,
    names.length,
  );
}

async function missingTitles(names) {
  const missing = [];
  for (const name of names) {
    if ((await page.getByText(name, { exact: true }).count()) === 0) missing.push(name);
  }
  return missing;
}

// showArtifact selects a file on the Artifacts tab and waits until its
// preview shows every expected text.
async function showArtifact(name, texts) {
  await openTab('artifacts', /artifacts/);
  await page.getByText(name, { exact: true }).first().click();
  for (const text of texts) {
    await page.getByText(text, { exact: false }).first().waitFor({ state: 'visible' });
  }
}

try {
  await page.goto(runURL, { waitUntil: 'domcontentloaded' });
  if (overview.length > 0) {
    // A long description is folded under "Show more": unfold it.
    await page.getByText(overview[0], { exact: false }).first().waitFor({ state: 'visible' });
    const more = page.getByText(/^show more$/i);
    if ((await more.count()) > 0) await more.first().click();
    for (const text of overview) {
      await page.getByText(text, { exact: false }).first().waitFor({ state: 'visible' });
    }
    await page.waitForTimeout(1000); // let the page finish rendering
    const shown = [];
    for (const text of opt['overview-absent'].split(',').filter(Boolean)) {
      if ((await page.getByText(text, { exact: false }).count()) > 0) shown.push(text);
    }
    if (shown.length > 0) {
      failed = `the Overview page shows ${shown.join(', ')}`;
    } else {
      await page.screenshot({ path: opt.out, fullPage: true });
    }
  } else if (opt.artifact) {
    await showArtifact(opt.artifact, artifactExpected);
    await page.waitForTimeout(1000); // let the preview finish rendering
    await page.screenshot({ path: opt.out, fullPage: true });
  } else {
    await openTab('system metrics', /system-metrics/);
    // bridge logs some forty series and the UI only draws the charts scrolled
    // into view; its chart search takes a regular expression, which keeps
    // exactly the expected ones on the first screen.
    const search = page.getByPlaceholder(/search metric charts/i);
    await search.fill(expected.map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'));
    await waitForTitles(expected);
    await page.waitForTimeout(1000); // let the last chart finish its transition
    const missing = await missingTitles(expected);
    if (missing.length > 0) {
      failed = `no chart titled ${missing.join(', ')} on the System metrics tab`;
    } else {
      await page.screenshot({ path: opt.out, fullPage: true });
      if (modelExpected.length > 0) {
        await openTab('model metrics', /model-metrics/);
        await waitForTitles(modelExpected);
        const missingModel = await missingTitles(modelExpected);
        if (missingModel.length > 0) {
          failed = `no chart titled ${missingModel.join(', ')} on the Model metrics tab`;
        }
      }
    }
  }
} catch (err) {
  failed = String(err);
}

// On failure, what the page showed then, beside (not over) any screenshot
// of the System metrics tab already taken.
const out = failed ? opt.out.replace(/\.png$/, '') + '.failed.png' : opt.out;
if (failed) {
  await page.screenshot({ path: out, fullPage: true });
}
await context.close();
rmSync(profile, { recursive: true, force: true });

if (failed) {
  console.error(`shot.mjs: ${runURL}: ${failed} (screenshot: ${out})`);
  process.exit(1);
}
if (overview.length > 0) {
  console.log(`shot.mjs: the Overview page shows ${overview.join(', ')} at ${runURL}; screenshot ${opt.out}`);
  process.exit(0);
}
if (opt.artifact) {
  console.log(`shot.mjs: ${opt.artifact} shown with ${artifactExpected.join(', ')} at ${runURL}; screenshot ${opt.out}`);
  process.exit(0);
}
console.log(`shot.mjs: ${expected.length} system metric charts (${expected.join(', ')}) and ${modelExpected.length} model metric charts (${modelExpected.join(', ')}) shown at ${runURL}; screenshot ${out}`);
