// The GPU console: polls api/console and renders it as text only (textContent, never innerHTML).
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
  // `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`; `—` for unknown.
  function formatDuration(seconds) {
    if (typeof seconds !== 'number' || !Number.isFinite(seconds)) return '—';
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + ' s';
    const minutes = Math.floor(s / 60);
    if (minutes < 60) return minutes + ' min';
    const hours = Math.floor(minutes / 60);
    if (hours < 24) return hours + ' h ' + (minutes % 60) + ' min';
    return Math.floor(hours / 24) + ' d ' + (hours % 24) + ' h';
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
    const POLL_MS = 2000;
    const SVG = 'http://www.w3.org/2000/svg';
    let timer = null;

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
    function chart(history) {
      const svg = document.createElementNS(SVG, 'svg');
      svg.setAttribute('viewBox', '0 0 100 48');
      svg.setAttribute('preserveAspectRatio', 'none');
      const t = history.t || [];
      if (t.length > 1) {
        const util = [],
          mem = [];
        t.forEach(function (time, i) {
          if (history.utilization[i] !== null) util.push([time, history.utilization[i]]);
          if (history.memory[i] !== null) mem.push([time, history.memory[i]]);
        });
        svg.appendChild(line(mem, 'mem', t[0], t[t.length - 1]));
        svg.appendChild(line(util, 'util', t[0], t[t.length - 1]));
      }
      return svg;
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
        card.appendChild(chart(gpu.history));
        cards.push(card);
      });
      box.replaceChildren.apply(box, cards);
    }
    function shutdown(user, kernel, button) {
      button.disabled = true;
      fetch('api/users/' + encodeURIComponent(user) + '/kernels/' + encodeURIComponent(kernel.kernel_id), {
        method: 'DELETE',
        headers: { 'X-XSRFToken': xsrf() },
        credentials: 'same-origin'
      })
        .then(function (response) {
          if (!response.ok)
            return response.json().then(function (body) {
              throw new Error(body.message);
            });
          refresh();
        })
        .catch(function (error) {
          button.disabled = false;
          button.textContent = format.neutralize('failed: ' + error.message);
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
      return (
        format.formatBytes(kernel.gpu_memory) +
        (kernel.memory_source === 'report' ? " (the kernel's report)" : '')
      );
    }
    function renderUsers(data) {
      const body = document.querySelector('#jg-users tbody');
      const rows = [];
      data.users.forEach(function (user) {
        const head = el('tr', null, 'jg-user');
        head.dataset.user = user.name;
        head.appendChild(el('td', user.name));
        const status = el(
          'td',
          user.error || user.kernels.length + ' kernel(s)',
          user.error ? 'jg-error' : ''
        );
        (user.warnings || []).forEach(function (text) {
          status.appendChild(el('div', text, 'jg-warning'));
        });
        head.appendChild(status);
        head.appendChild(el('td', ''));
        head.appendChild(el('td', user.gpu_memory ? format.formatBytes(user.gpu_memory) : '–'));
        head.appendChild(el('td', ''));
        head.appendChild(el('td', ''));
        head.appendChild(el('td', ''));
        rows.push(head);
        user.kernels.forEach(function (kernel) {
          const row = el('tr', null, kernel.idle ? 'jg-idle' : '');
          row.dataset.user = user.name;
          row.appendChild(el('td', ''));
          row.appendChild(
            el('td', kernel.notebook || (kernel.kernel_id ? kernel.kernel_id.slice(0, 8) : '(hidden)'))
          );
          row.appendChild(el('td', (kernel.execution_state || '?') + (kernel.idle ? ' · idle' : '')));
          row.appendChild(el('td', memoryText(kernel)));
          row.appendChild(el('td', format.formatDuration(kernel.idle_s)));
          row.appendChild(el('td', format.formatDuration(kernel.cull_in_s)));
          const cell = el('td');
          if (data.admin && kernel.kernel_id && kernel.gpu_memory > 0 && kernel.execution_state !== 'busy') {
            const button = el('button', 'Shut down');
            button.title = 'Shut this kernel down (the user loses its state)';
            button.addEventListener('click', function () {
              shutdown(user.name, kernel, button);
            });
            cell.appendChild(button);
          }
          row.appendChild(cell);
          rows.push(row);
        });
      });
      body.replaceChildren.apply(body, rows);
    }
    function render(data) {
      const status = document.getElementById('jg-status');
      status.textContent =
        (data.admin ? 'admin view' : 'read-only view') +
        (data.simulated ? ' · simulated GPUs' : '') +
        (data.source === 'prometheus' ? ' · from Prometheus, ' + data.hosts.length + ' host(s)' : '') +
        ' · ' +
        new Date(data.timestamp * 1000).toLocaleTimeString();
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
      // JupyterHub checks XSRF on every cookie-authenticated fetch, GET included.
      fetch('api/console', { credentials: 'same-origin', headers: { 'X-XSRFToken': xsrf() } })
        .then(function (response) {
          if (!response.ok)
            return response.json().then(function (body) {
              throw new Error(body.message);
            });
          return response.json();
        })
        .then(render)
        .catch(function (error) {
          document.getElementById('jg-status').textContent = format.neutralize(
            'cannot load: ' + error.message
          );
        })
        .finally(function () {
          timer = setTimeout(refresh, POLL_MS);
        });
    }
    refresh();
  })(globalThis.jupyterGpuFormat);
}
