// @vitest-environment jsdom
import { PageConfig } from '@jupyterlab/coreutils';
import { afterEach, describe, expect, it } from 'vitest';

import { IUsageAnswer, UsageSummary, usageAvailable, usageText } from '../components/usageSummary';
import { ServerExtensionMissingError } from '../server';

function answer(more: Partial<IUsageAnswer> = {}): IUsageAnswer {
  return {
    window: 'week',
    user: 'ann',
    gpu_hours: 12.5,
    gib_hours: 40,
    busy_hours: 8.75,
    idle_hours: 3.75,
    notebooks: [
      { notebook: 'small.ipynb', gpu_hours: 2.5, gib_hours: 10, busy_hours: 2.5, idle_hours: 0 },
      { notebook: 'train.ipynb', gpu_hours: 10, gib_hours: 30, busy_hours: 6.25, idle_hours: 3.75 }
    ],
    ...more
  };
}

const summaries: UsageSummary[] = [];
function summary(fetch: () => Promise<IUsageAnswer>, available = true): UsageSummary {
  const created = new UsageSummary(fetch, 0, available);
  summaries.push(created);
  return created;
}
afterEach(() => summaries.splice(0).forEach(s => s.dispose()));

describe('usageText', () => {
  it('says GPU-hours, GiB-hours and the idle share, the notebooks most used first in the title', () => {
    const { line, title } = usageText(answer());
    expect(line).toBe('Your GPU use this week: 12.5 GPU-hours, 40 GiB-hours, 30 % idle');
    expect(title).toBe('train.ipynb: 10 GPU-hours\nsmall.ipynb: 2.5 GPU-hours');
  });

  it('says none for no use, names the window, and shows hidden characters as such', () => {
    expect(usageText(answer({ gpu_hours: 0, window: 'day' })).line).toBe('Your GPU use today: none');
    const odd = answer({
      window: '30d',
      notebooks: [{ notebook: 'a\u202eb.ipynb', gpu_hours: 1, gib_hours: 1, busy_hours: 1, idle_hours: 0 }]
    });
    expect(usageText(odd).line.startsWith('Your GPU use in 30 days:')).toBe(true);
    expect(usageText(odd).title).toBe('a\ufffdb.ipynb: 1 GPU-hours');
  });

  it('keeps five notebooks in the title and counts the rest', () => {
    const notebooks = Array.from({ length: 7 }, (_, i) => ({
      notebook: `n${i}.ipynb`,
      gpu_hours: i,
      gib_hours: 0,
      busy_hours: i,
      idle_hours: 0
    }));
    const lines = usageText(answer({ notebooks })).title.split('\n');
    expect(lines).toHaveLength(6);
    expect(lines[0]).toBe('n6.ipynb: 6 GPU-hours');
    expect(lines[5]).toBe('and 2 more');
  });
});

describe('UsageSummary', () => {
  it('stays hidden until answered, then shows the line as text', async () => {
    const s = summary(async () =>
      answer({
        notebooks: [{ notebook: '<img src=x>', gpu_hours: 1, gib_hours: 0, busy_hours: 1, idle_hours: 0 }]
      })
    );
    expect(s.node.hidden).toBe(true);
    await s.refresh();
    expect(s.node.hidden).toBe(false);
    expect(s.node.textContent).toBe('Your GPU use this week: 12.5 GPU-hours, 40 GiB-hours, 30 % idle');
    expect(s.node.title).toBe('<img src=x>: 1 GPU-hours');
    expect(s.node.querySelector('img')).toBeNull();
  });

  it('hides itself without a hub service (404) and says why on other failures', async () => {
    const missing = summary(async () => {
      throw new ServerExtensionMissingError('/jupyter-gpu/usage');
    });
    await missing.refresh();
    expect(missing.node.hidden).toBe(true);
    const failing = summary(async () => {
      throw new Error('the jupyter-gpu service answered HTTP 500');
    });
    await failing.refresh();
    expect(failing.node.hidden).toBe(false);
    expect(failing.node.textContent).toBe(
      'Your GPU use: not available (the jupyter-gpu service answered HTTP 500)'
    );
  });

  it('never asks without a hub service (no 404 logged per page load)', async () => {
    let asked = 0;
    const s = summary(async () => {
      asked++;
      return answer();
    }, false);
    await s.refresh();
    expect(asked).toBe(0);
    expect(s.node.hidden).toBe(true);
  });
});

describe('usageAvailable', () => {
  afterEach(() => PageConfig.setOption('jupyterGpuUsage', ''));

  it("follows the page config's jupyterGpuUsage, false when it is absent", () => {
    expect(usageAvailable()).toBe(false);
    PageConfig.setOption('jupyterGpuUsage', 'true');
    expect(usageAvailable()).toBe(true);
    PageConfig.setOption('jupyterGpuUsage', 'false');
    expect(usageAvailable()).toBe(false);
  });
});
