/** The sidebar's tab icon: a graphics card. Uses `jp-icon3` so it follows the light/dark theme. */
import { LabIcon } from '@jupyterlab/ui-components';

const gpuSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M2 6h18a2 2 0 0 1 2 2v8a2 2 0 0 1-2 2h-3v2h-2v-2H9v2H7v-2H4v2H2zm2 2v8h16V8zm3 1.5a2.5 2.5 0 1 1 0 5a2.5 2.5 0 0 1 0-5m8 0a2.5 2.5 0 1 1 0 5a2.5 2.5 0 0 1 0-5"/>
  </g>
</svg>`;

export const gpuIcon = new LabIcon({ name: 'jupyter-gpu:gpu', svgstr: gpuSvg });
