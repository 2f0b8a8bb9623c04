/**
 * The extension's MIME renderers (package.json `jupyterlab.mimeExtension`): the restart offer
 * ("Restart kernel and apply", restart.ts) and the out-of-memory report with its buttons (oom.ts).
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';

import { oomExtension } from './oom';
import restartExtension from './restart';

const extensions: IRenderMime.IExtension[] = [restartExtension, oomExtension];

export default extensions;
