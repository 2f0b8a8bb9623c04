// The GPU console: polls api/console and renders it as text only (textContent, never innerHTML).
// Its words are in the page's language: __("…"), _n(…), _p(…) look them up in the catalog the
// service embeds in the page (jg-i18n, jupyter_gpu/hub/page.py), fill() puts values into their
// {placeholders} after translation; scripts/i18n.py extracts them into console.po.
'use strict';

// How the console writes sizes, durations and text from elsewhere: the twins of
// jupyter_gpu/core/units.py and core/text.py (their docstrings state the rules) and of
// labextension/src/format.ts. tests/golden/format.json pins all three; the golden test runs this
// file under node, where there is no document, and reads globalThis.jupyterGpuFormat.
globalThis.jupyterGpuFormat = (function () {
  const MIB = 1024 * 1024;
  const GIB = 1024 * MIB;
  // Cc, Cf, Cs, Co, Zl and Zp as of Unicode 15.1, as explicit ranges (core/text.py HIDDEN_RANGES).
  const HIDDEN = new RegExp(
    '[' +
      [
        '\\u{0}-\\u{1f}', // Cc: C0 controls
        '\\u{7f}-\\u{9f}', // Cc: DEL and C1 controls
        '\\u{ad}', // Cf: SOFT HYPHEN
        '\\u{600}-\\u{605}', // Cf: Arabic number signs
        '\\u{61c}', // Cf: ARABIC LETTER MARK
        '\\u{6dd}', // Cf: ARABIC END OF AYAH
        '\\u{70f}', // Cf: SYRIAC ABBREVIATION MARK
        '\\u{890}-\\u{891}', // Cf: Arabic pound/piastre mark above
        '\\u{8e2}', // Cf: ARABIC DISPUTED END OF AYAH
        '\\u{180e}', // Cf: MONGOLIAN VOWEL SEPARATOR
        '\\u{200b}-\\u{200f}', // Cf: ZWSP, ZWNJ, ZWJ, LRM, RLM
        '\\u{2028}-\\u{2029}', // Zl, Zp: LINE SEPARATOR, PARAGRAPH SEPARATOR
        '\\u{202a}-\\u{202e}', // Cf: LRE, RLE, PDF, LRO, RLO
        '\\u{2060}-\\u{2064}', // Cf: WORD JOINER, invisible operators
        '\\u{2066}-\\u{206f}', // Cf: LRI, RLI, FSI, PDI, deprecated format characters
        '\\u{d800}-\\u{dfff}', // Cs: surrogates (only lone ones exist in text)
        '\\u{e000}-\\u{f8ff}', // Co: private use
        '\\u{feff}', // Cf: ZERO WIDTH NO-BREAK SPACE (BOM)
        '\\u{fff9}-\\u{fffb}', // Cf: interlinear annotation
        '\\u{110bd}', // Cf: KAITHI NUMBER SIGN
        '\\u{110cd}', // Cf: KAITHI NUMBER SIGN ABOVE
        '\\u{13430}-\\u{1343f}', // Cf: Egyptian hieroglyph format controls
        '\\u{1bca0}-\\u{1bca3}', // Cf: shorthand format controls
        '\\u{1d173}-\\u{1d17a}', // Cf: musical symbol format controls
        '\\u{e0001}', // Cf: LANGUAGE TAG
        '\\u{e0020}-\\u{e007f}', // Cf: tag characters
        '\\u{f0000}-\\u{ffffd}', // Co: supplementary private use area A
        '\\u{100000}-\\u{10fffd}' // Co: supplementary private use area B
      ].join('') +
      ']',
    'gu'
  );

  // `80 GiB`, `74.2 GiB`, `512 MiB`, `-2 GiB`; `—` for unknown. Half-up on the exact byte count.
  function formatBytes(bytes) {
    if (typeof bytes !== 'number' || !Number.isFinite(bytes)) return '—';
    const magnitude = Math.abs(bytes);
    let count = Math.floor(magnitude);
    if (magnitude - count >= 0.5) count += 1;
    const mibWhole = Math.floor(count / MIB);
    const mebibytes = mibWhole + (2 * (count - mibWhole * MIB) >= MIB ? 1 : 0);
    let text;
    if (count < GIB && mebibytes < 1024) {
      text = mebibytes + ' MiB';
    } else {
      const gibWhole = Math.floor(count / GIB);
      const tenths = gibWhole * 10 + Math.floor((10 * (count - gibWhole * GIB) + GIB / 2) / GIB);
      const tenth = tenths % 10;
      text = (tenths - tenth) / 10 + (tenth ? '.' + tenth : '') + ' GiB';
    }
    return bytes < 0 && text !== '0 MiB' ? '-' + text : text;
  }
  // `45 s`, `12 min`, `3 h 5 min`, `1 h`, `2 d 4 h`, `1 d` (a zero part left out); `—` for unknown.
  function formatDuration(seconds) {
    if (typeof seconds !== 'number' || !Number.isFinite(seconds)) return '—';
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + ' s';
    const minutes = Math.floor(s / 60);
    if (minutes < 60) return minutes + ' min';
    const hours = Math.floor(minutes / 60);
    if (hours < 24) return hours + ' h' + (minutes % 60 ? ' ' + (minutes % 60) + ' min' : '');
    return Math.floor(hours / 24) + ' d' + (hours % 24 ? ' ' + (hours % 24) + ' h' : '');
  }
  // Every hidden character replaced by U+FFFD.
  function neutralize(text) {
    return text.replace(HIDDEN, '\ufffd');
  }
  // At most maxChars code points, the last one "…" when cut; never splits a mark from its base.
  function truncate(text, maxChars) {
    const chars = Array.from(text);
    if (chars.length <= maxChars) return text;
    let cut = maxChars - 1;
    while (cut > 0 && /\p{M}/u.test(chars[cut])) cut--;
    return chars.slice(0, cut).join('') + '…';
  }
  function displayText(value, missing, maxChars) {
    if (value === null || value === undefined) return missing;
    return truncate(neutralize(String(value)), maxChars);
  }
  return {
    formatBytes: formatBytes,
    formatDuration: formatDuration,
    neutralize: neutralize,
    truncate: truncate,
    displayText: displayText
  };
})();

if (typeof document !== 'undefined') {
  (function (format) {
    // The catalog the service embedded: {"language": "zh_CN", "messages": {id: text or [forms]}}.
    const I18N = (function () {
      const node = document.getElementById('jg-i18n');
      try {
        const data = node && node.textContent ? JSON.parse(node.textContent) : null;
        if (data && typeof data.language === 'string' && data.messages) return data;
      } catch {
        // not expected (the service writes it): English
      }
      return { language: 'en', messages: {} };
    })();
    function lookup(key) {
      return Object.prototype.hasOwnProperty.call(I18N.messages, key) ? I18N.messages[key] : null;
    }
    function __(text) {
      const found = lookup(text);
      return typeof found === 'string' ? found : text;
    }
    // A plural: the catalogs' languages have one form (zh_CN) or two, the second for n != 1 (en).
    function _n(singular, plural, count) {
      const found = lookup(singular);
      if (Array.isArray(found) && found.length) return found[found.length === 1 || count === 1 ? 0 : 1];
      return count === 1 ? singular : plural;
    }
    function _p(context, text) {
      const found = lookup(context + '\u0004' + text);
      return typeof found === 'string' ? found : text;
    }
    // "held by {holders}" with its values, after translation (as Python's str.format).
    function fill(text, values) {
      return text.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, function (whole, name) {
        return Object.prototype.hasOwnProperty.call(values, name) ? String(values[name]) : whole;
      });
    }
    // Every request carries the page's language, so that the messages it answers match the page.
    function withLanguage(url) {
      return url + (url.indexOf('?') === -1 ? '?' : '&') + 'lang=' + encodeURIComponent(I18N.language);
    }
    // Jupyter's kernel execution states, as JupyterLab's language pack says them.
    const STATES = {
      busy: _p('kernel state', 'busy'),
      idle: _p('kernel state', 'idle'),
      starting: _p('kernel state', 'starting'),
      dead: _p('kernel state', 'dead')
    };
    const POLL_MS = 2000;
    const USAGE_POLL_MS = 60000;
    const PAGE_USERS = 50; // users per page: the page stays readable (and quick) at 200 users
    const SVG = 'http://www.w3.org/2000/svg';
    let timer = null;
    let usageTimer = null;
    let latest = null; // the last api/console answer
    let usage = null; // the last api/usage answer
    // What the viewer chose: the user filter, each table's sort and page.
    const view = {
      filter: '',
      users: { key: 'name', descending: false, page: 0 },
      usage: { key: 'gpu_hours', descending: true, page: 0 }
    };

    // Every text the console shows goes through here: neutralised (the hub already did, this page
    // does not rely on it).
    function el(tag, text, cls) {
      const node = document.createElement(tag);
      if (text !== undefined && text !== null) node.textContent = format.neutralize(String(text));
      if (cls) node.className = cls;
      return node;
    }
    function xsrf() {
      const match = document.cookie.match(/(?:^|;\s*)_xsrf=([^;]*)/);
      return match ? decodeURIComponent(match[1]) : '';
    }
    function getJson(url) {
      // JupyterHub checks XSRF on every cookie-authenticated fetch, GET included.
      return fetch(withLanguage(url), {
        credentials: 'same-origin',
        headers: { 'X-XSRFToken': xsrf() }
      }).then(function (response) {
        if (!response.ok)
          return response.json().then(function (body) {
            throw new Error(body.message);
          });
        return response.json();
      });
    }
    // Times of day in the viewer's locale. A page's first locale formatting loads the browser's
    // locale data (60-100 ms in a fresh page on a loaded machine): the first render leaves its
    // times empty and they are written once the first paint is on screen and the browser is idle
    // (at most a second later: localeWhenIdle); later renders write them at once.
    let localeReady = false;
    let pendingTimes = [];
    function whenLocaleReady(write) {
      if (localeReady) write();
      else pendingTimes.push(write);
    }
    function localeWhenIdle() {
      const later = globalThis.requestIdleCallback
        ? function (run) {
            requestIdleCallback(run, { timeout: 1000 });
          }
        : function (run) {
            setTimeout(run, 0);
          };
      requestAnimationFrame(function () {
        later(function () {
          localeReady = true;
          pendingTimes.forEach(function (write) {
            write();
          });
          pendingTimes = [];
        });
      });
    }
    function clock(seconds) {
      return new Date(seconds * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    }
    function line(values, cls, t0, t1) {
      const path = document.createElementNS(SVG, 'polyline');
      path.setAttribute('class', cls);
      path.setAttribute(
        'points',
        values
          .map(function (p) {
            return (
              (((p[0] - t0) / Math.max(1, t1 - t0)) * 100).toFixed(2) + ',' + (48 - p[1] * 0.46).toFixed(2)
            );
          })
          .join(' ')
      );
      return path;
    }
    // The chart of one GPU as the sidebar draws it: utilization and memory in percent over time,
    // a time axis under it (first sample, middle, newest) and a legend with the newest values.
    function chart(history) {
      const figure = el('figure', null, 'jg-chart');
      const svg = document.createElementNS(SVG, 'svg');
      svg.setAttribute('viewBox', '0 0 100 48');
      svg.setAttribute('preserveAspectRatio', 'none');
      const t = history.t || [];
      const util = [],
        mem = [];
      t.forEach(function (time, i) {
        if (history.utilization[i] !== null) util.push([time, history.utilization[i]]);
        if (history.memory[i] !== null) mem.push([time, history.memory[i]]);
      });
      if (t.length > 1) {
        svg.appendChild(line(mem, 'mem', t[0], t[t.length - 1]));
        svg.appendChild(line(util, 'util', t[0], t[t.length - 1]));
      }
      figure.appendChild(svg);
      const axis = el('div', null, 'jg-axis');
      axis.setAttribute('aria-hidden', 'true');
      if (t.length > 1) {
        [t[0], (t[0] + t[t.length - 1]) / 2, t[t.length - 1]].forEach(function (time) {
          const label = axis.appendChild(el('span'));
          whenLocaleReady(function () {
            label.textContent = clock(time);
          });
        });
      }
      figure.appendChild(axis);
      const legend = el('figcaption', null, 'jg-legend');
      const newest = function (points) {
        return points.length ? Math.round(points[points.length - 1][1]) + ' %' : '—';
      };
      [
        ['util', fill(__('utilization {value}'), { value: newest(util) })],
        ['mem', fill(__('memory {value}'), { value: newest(mem) })]
      ].forEach(function (key) {
        const item = el('span', null, 'jg-key jg-key-' + key[0]);
        item.appendChild(el('span', null, 'jg-swatch'));
        item.appendChild(el('span', key[1]));
        legend.appendChild(item);
      });
      figure.appendChild(legend);
      return figure;
    }
    // "held by bob 4 GiB, alice 1 GiB": who holds memory on the GPU now (NVML's owners).
    function holders(data, key) {
      const held = [];
      data.users.forEach(function (user) {
        const bytes = user.memory_by_gpu[key];
        if (bytes) held.push([user.name, bytes]);
      });
      held.sort(function (a, b) {
        return b[1] - a[1] || (a[0] < b[0] ? -1 : 1);
      });
      if (!held.length) return __('held by nobody');
      const shown = held
        .slice(0, 5)
        .map(function (entry) {
          return entry[0] + ' ' + format.formatBytes(entry[1]);
        })
        .join(', ');
      if (held.length <= 5) return fill(__('held by {holders}'), { holders: shown });
      return fill(
        _n('held by {holders} and {count} more', 'held by {holders} and {count} more', held.length - 5),
        {
          holders: shown,
          count: held.length - 5
        }
      );
    }
    function renderGpus(data) {
      const box = document.getElementById('jg-gpus');
      // Prometheus mode with several nodes: the GPUs under a heading per host.
      const hosts = data.hosts && data.hosts.length > 1 ? data.hosts : null;
      let lastHost = null;
      const cards = [];
      data.gpus.forEach(function (gpu) {
        if (hosts && gpu.host !== lastHost) {
          lastHost = gpu.host;
          const heading = el('h3', gpu.host, 'jg-host');
          heading.dataset.host = gpu.host;
          cards.push(heading);
        }
        const card = el('div', null, 'jg-gpu');
        card.dataset.index = gpu.index;
        if (gpu.host) card.dataset.host = gpu.host;
        card.appendChild(el('div', 'GPU ' + gpu.index + ' · ' + gpu.name));
        if (gpu.error) card.appendChild(el('div', gpu.error, 'jg-error'));
        else
          card.appendChild(
            el(
              'div',
              format.formatBytes(gpu.memory_used) +
                ' / ' +
                format.formatBytes(gpu.memory_total) +
                ' · ' +
                (gpu.utilization === null ? '—' : gpu.utilization + ' %'),
              'jg-muted'
            )
          );
        // The one rule's words for this viewer (hub/core.py: free, reserved by you, ...), as every face says them.
        if (typeof gpu.availability === 'string')
          card.appendChild(el('div', gpu.availability, 'jg-availability'));
        card.appendChild(
          el('div', holders(data, gpu.host ? gpu.host + ':' + gpu.index : String(gpu.index)), 'jg-holders')
        );
        card.appendChild(chart(gpu.history));
        cards.push(card);
      });
      box.replaceChildren.apply(box, cards);
    }
    function shutdown(user, kernel, button) {
      button.disabled = true;
      fetch(
        withLanguage(
          'api/users/' + encodeURIComponent(user) + '/kernels/' + encodeURIComponent(kernel.kernel_id)
        ),
        {
          method: 'DELETE',
          headers: { 'X-XSRFToken': xsrf() },
          credentials: 'same-origin'
        }
      )
        .then(function (response) {
          if (!response.ok)
            return response.json().then(function (body) {
              throw new Error(body.message);
            });
          refresh();
        })
        .catch(function (error) {
          button.disabled = false;
          button.textContent = format.neutralize(fill(__('failed: {error}'), { error: error.message }));
        });
    }
    function memoryText(kernel) {
      const parts = Object.keys(kernel.memory_by_gpu)
        .sort()
        .map(function (index) {
          return 'GPU ' + index + ': ' + format.formatBytes(kernel.memory_by_gpu[index]);
        });
      if (parts.length) return parts.join(', ');
      if (!kernel.gpu_memory) return '–';
      const memory = format.formatBytes(kernel.gpu_memory);
      return kernel.memory_source === 'report'
        ? fill(__("{memory} (the kernel's report)"), { memory: memory })
        : memory;
    }
    // The rows a table shows: filtered by user name, sorted by the chosen column (then by name).
    function arrange(rows, state) {
      const needle = view.filter.toLowerCase();
      const kept = rows.filter(function (row) {
        return !needle || row.name.toLowerCase().indexOf(needle) !== -1;
      });
      kept.sort(function (a, b) {
        const x = a[state.key],
          y = b[state.key];
        const order = typeof x === 'number' ? x - y : x < y ? -1 : x > y ? 1 : 0;
        return (state.descending ? -order : order) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
      });
      return kept;
    }
    // One page of ``rows`` (PAGE_USERS users) and the pager under the table ("users 51–100 of 200").
    function page(rows, state, pagerId, rerender) {
      const pages = Math.max(1, Math.ceil(rows.length / PAGE_USERS));
      state.page = Math.min(state.page, pages - 1);
      const pager = document.getElementById(pagerId);
      const parts = [];
      if (pages > 1) {
        const back = el('button', __('‹ previous'));
        back.disabled = state.page === 0;
        back.addEventListener('click', function () {
          state.page -= 1;
          rerender();
        });
        const next = el('button', __('next ›'));
        next.disabled = state.page === pages - 1;
        next.addEventListener('click', function () {
          state.page += 1;
          rerender();
        });
        const first = state.page * PAGE_USERS + 1;
        const last = Math.min(rows.length, first + PAGE_USERS - 1);
        const where = fill(__('users {first}–{last} of {total}'), {
          first: first,
          last: last,
          total: rows.length
        });
        parts.push(back, el('span', where, 'jg-muted'), next);
      }
      pager.replaceChildren.apply(pager, parts);
      return rows.slice(state.page * PAGE_USERS, (state.page + 1) * PAGE_USERS);
    }
    // Column headers with data-sort sort their table on click or Enter, and say so in aria-sort.
    function sortable(tableId, state, rerender) {
      document.querySelectorAll('#' + tableId + ' th[data-sort]').forEach(function (th) {
        th.tabIndex = 0;
        const choose = function () {
          if (state.key === th.dataset.sort) state.descending = !state.descending;
          else {
            state.key = th.dataset.sort;
            state.descending = th.dataset.sort !== 'name';
          }
          state.page = 0; // a new order starts at its top
          rerender();
        };
        th.addEventListener('click', choose);
        th.addEventListener('keydown', function (event) {
          if (event.key === 'Enter' || event.key === ' ') {
            event.preventDefault();
            choose();
          }
        });
      });
    }
    function markSort(tableId, state) {
      document.querySelectorAll('#' + tableId + ' th[data-sort]').forEach(function (th) {
        th.setAttribute(
          'aria-sort',
          th.dataset.sort === state.key ? (state.descending ? 'descending' : 'ascending') : 'none'
        );
      });
    }
    function renderUsers(data) {
      const body = document.querySelector('#jg-users tbody');
      const rows = [];
      markSort('jg-users', view.users);
      page(arrange(data.users.slice(), view.users), view.users, 'jg-users-pages', rerenderUsers).forEach(
        function (user) {
          const head = el('tr', null, 'jg-user');
          head.dataset.user = user.name;
          head.appendChild(el('td', user.name));
          const status = el(
            'td',
            user.error ||
              fill(_n('{count} kernel', '{count} kernels', user.kernels.length), {
                count: user.kernels.length
              }),
            user.error ? 'jg-error' : ''
          );
          (user.warnings || []).forEach(function (text) {
            status.appendChild(el('div', text, 'jg-warning'));
          });
          head.appendChild(status);
          head.appendChild(el('td', ''));
          head.appendChild(el('td', user.gpu_memory ? format.formatBytes(user.gpu_memory) : '–'));
          const rest = el('td'); // idle for, will be culled in, the button: one empty cell, not three
          rest.colSpan = 3;
          head.appendChild(rest);
          rows.push(head);
          // The viewer's own runs (`jupyter-gpu run`), from their claims: nobody else's row has any.
          (user.runs || []).forEach(function (text) {
            const row = el('tr', null, 'jg-run');
            row.dataset.user = user.name;
            row.appendChild(el('td', ''));
            row.appendChild(el('td', fill(__('yours: {run}'), { run: text })));
            rows.push(row);
          });
          user.kernels.forEach(function (kernel) {
            const row = el('tr', null, kernel.idle ? 'jg-idle' : '');
            row.dataset.user = user.name;
            row.appendChild(el('td', ''));
            row.appendChild(
              el('td', kernel.notebook || (kernel.kernel_id ? kernel.kernel_id.slice(0, 8) : __('(hidden)')))
            );
            const state = STATES[kernel.execution_state] || kernel.execution_state || '?';
            // the mark: idle past the user server's idle_threshold_s while holding GPU memory (not
            // the execution state "idle", which any kernel between cells has: "idle · idle" said both)
            row.appendChild(
              el('td', kernel.idle ? fill(__('{state} · over the idle limit'), { state: state }) : state)
            );
            row.appendChild(el('td', memoryText(kernel)));
            row.appendChild(el('td', format.formatDuration(kernel.idle_s)));
            row.appendChild(el('td', format.formatDuration(kernel.cull_in_s)));
            const cell = el('td');
            if (
              data.admin &&
              kernel.kernel_id &&
              kernel.gpu_memory > 0 &&
              kernel.execution_state !== 'busy'
            ) {
              const button = el('button', __('Shut down'));
              button.title = __('Shut this kernel down (the user loses its state)');
              button.addEventListener('click', function () {
                shutdown(user.name, kernel, button);
              });
              cell.appendChild(button);
            }
            row.appendChild(cell);
            rows.push(row);
          });
        }
      );
      body.replaceChildren.apply(body, rows);
    }
    function rerenderUsers() {
      if (latest) renderUsers(latest);
    }
    const FIGURES = ['gpu_hours', 'gib_hours', 'busy_hours', 'idle_hours'];
    // The usage table: a row per user (totals) and, for an admin or one's own, a row per notebook;
    // the numbers as the service rounded them, exactly as the CSV export writes them.
    function renderUsage() {
      const body = document.querySelector('#jg-usage tbody');
      const rows = [];
      markSort('jg-usage', view.usage);
      if (!usage) return;
      page(arrange(usage.users, view.usage), view.usage, 'jg-usage-pages', renderUsage).forEach(
        function (user) {
          const head = el('tr', null, 'jg-user');
          head.dataset.user = user.name;
          head.appendChild(el('td', user.name));
          head.appendChild(
            el(
              'td',
              fill(_n('{count} notebook', '{count} notebooks', user.notebooks.length), {
                count: user.notebooks.length
              })
            )
          );
          FIGURES.forEach(function (key) {
            head.appendChild(el('td', user[key].toFixed(2), 'jg-number'));
          });
          rows.push(head);
          user.notebooks.forEach(function (entry) {
            const row = el('tr', null, 'jg-notebook');
            row.dataset.user = user.name;
            row.appendChild(el('td', ''));
            row.appendChild(el('td', entry.notebook || __('(outside notebooks)')));
            FIGURES.forEach(function (key) {
              row.appendChild(el('td', entry[key].toFixed(2), 'jg-number'));
            });
            rows.push(row);
          });
        }
      );
      if (!rows.length) {
        const empty = el('tr');
        const cell = el('td', __('no GPU use in this window'), 'jg-muted');
        cell.colSpan = 6;
        empty.appendChild(cell);
        rows.push(empty);
      }
      body.replaceChildren.apply(body, rows);
    }
    function refreshUsage() {
      clearTimeout(usageTimer);
      const span = document.getElementById('jg-window').value;
      const csv = document.getElementById('jg-csv');
      csv.href = 'api/usage.csv?window=' + encodeURIComponent(span) + '&_xsrf=' + encodeURIComponent(xsrf());
      getJson('api/usage?window=' + encodeURIComponent(span))
        .then(function (data) {
          usage = data;
          csv.hidden = !data.admin;
          document.getElementById('jg-usage-status').textContent = format.neutralize(
            fill(__('since {time} (hours of the usage file, sampled every {interval})'), {
              time: new Date(data.since * 1000).toLocaleString(),
              interval: format.formatDuration(data.interval_s)
            })
          );
          renderUsage();
          document.body.dataset.usageRendered = String(Date.now());
        })
        .catch(function (error) {
          document.getElementById('jg-usage-status').textContent = format.neutralize(
            fill(__('no usage: {error}'), { error: error.message })
          );
        })
        .finally(function () {
          usageTimer = setTimeout(refreshUsage, USAGE_POLL_MS);
        });
    }
    function render(data) {
      latest = data;
      const status = document.getElementById('jg-status');
      const parts = [data.admin ? __('admin view') : __('read-only view')];
      if (data.simulated) parts.push(__('simulated GPUs'));
      if (data.source === 'prometheus')
        parts.push(fill(__('from Prometheus, {count} host(s)'), { count: data.hosts.length }));
      const view = parts.join(' · ');
      status.textContent = view;
      whenLocaleReady(function () {
        if (latest === data)
          status.textContent = view + ' · ' + new Date(data.timestamp * 1000).toLocaleTimeString();
      });
      const warnings = document.getElementById('jg-warnings');
      const lines = (data.error ? [data.error] : []).concat(data.warnings);
      warnings.replaceChildren.apply(
        warnings,
        lines.map(function (text) {
          return el('div', text, 'jg-warning');
        })
      );
      renderGpus(data);
      renderUsers(data);
      document.body.dataset.rendered = String(Date.now());
    }
    function refresh() {
      clearTimeout(timer);
      getJson('api/console')
        .then(render)
        .catch(function (error) {
          document.getElementById('jg-status').textContent = format.neutralize(
            fill(__('cannot load: {error}'), { error: error.message })
          );
        })
        .finally(function () {
          timer = setTimeout(refresh, POLL_MS);
        });
    }
    sortable('jg-users', view.users, rerenderUsers);
    sortable('jg-usage', view.usage, renderUsage);
    document.getElementById('jg-filter').addEventListener('input', function (event) {
      view.filter = event.target.value.trim();
      view.users.page = 0;
      view.usage.page = 0;
      rerenderUsers();
      renderUsage();
    });
    document.getElementById('jg-window').addEventListener('change', function () {
      view.usage.page = 0;
      refreshUsage();
    });
    // The first answer comes inline in the page (ConsolePage: a JSON script element, never HTML),
    // so the first paint waits for no request; later ones are polled.
    const first = document.getElementById('jg-first');
    let firstData = null;
    try {
      firstData = first && first.textContent ? JSON.parse(first.textContent) : null;
    } catch {
      firstData = null; // not expected (the service writes it): ask for it instead
    }
    // The usage table is below the users: its request (and its rows, when the answer comes back
    // while the first frame is still being made) waits until the users are on screen.
    function afterFirstPaint(run) {
      requestAnimationFrame(function () {
        setTimeout(run, 0); // a task after the frame that painted what render() built
      });
    }
    if (firstData) {
      render(firstData);
      timer = setTimeout(refresh, POLL_MS);
    } else refresh();
    localeWhenIdle();
    afterFirstPaint(refreshUsage);
  })(globalThis.jupyterGpuFormat);
}
