// The GPU console: polls api/console and renders it as text only (textContent, never innerHTML).
'use strict';
(function () {
  const POLL_MS = 2000;
  const SVG = 'http://www.w3.org/2000/svg';
  let timer = null;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function gib(bytes) {
    return (bytes / 1073741824).toFixed(1) + ' GiB';
  }
  function duration(s) {
    if (s === null || s === undefined) return '–';
    if (s < 60) return Math.round(s) + ' s';
    if (s < 3600) return Math.round(s / 60) + ' min';
    return (s / 3600).toFixed(1) + ' h';
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
            gib(gpu.memory_used) +
              ' / ' +
              gib(gpu.memory_total) +
              ' · ' +
              (gpu.utilization === null ? '–' : gpu.utilization + ' %'),
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
        button.textContent = 'failed: ' + error.message;
      });
  }
  function memoryText(kernel) {
    const parts = Object.keys(kernel.memory_by_gpu)
      .sort()
      .map(function (index) {
        return 'GPU ' + index + ': ' + gib(kernel.memory_by_gpu[index]);
      });
    if (parts.length) return parts.join(', ');
    if (!kernel.gpu_memory) return '–';
    return gib(kernel.gpu_memory) + (kernel.memory_source === 'report' ? " (the kernel's report)" : '');
  }
  function renderUsers(data) {
    const body = document.querySelector('#jg-users tbody');
    const rows = [];
    data.users.forEach(function (user) {
      const head = el('tr', null, 'jg-user');
      head.dataset.user = user.name;
      head.appendChild(el('td', user.name));
      const status = el('td', user.error || user.kernels.length + ' kernel(s)', user.error ? 'jg-error' : '');
      (user.warnings || []).forEach(function (text) {
        status.appendChild(el('div', text, 'jg-warning'));
      });
      head.appendChild(status);
      head.appendChild(el('td', ''));
      head.appendChild(el('td', user.gpu_memory ? gib(user.gpu_memory) : '–'));
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
        row.appendChild(el('td', duration(kernel.idle_s)));
        row.appendChild(el('td', kernel.cull_in_s === null ? '–' : duration(kernel.cull_in_s)));
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
        document.getElementById('jg-status').textContent = 'cannot load: ' + error.message;
      })
      .finally(function () {
        timer = setTimeout(refresh, POLL_MS);
      });
  }
  refresh();
})();
