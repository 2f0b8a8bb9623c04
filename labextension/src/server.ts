/**
 * The one place that talks HTTP to the jupyter_gpu server extension.
 *
 * Requests go through `ServerConnection` so they carry the user's token/XSRF cookie and honour
 * JupyterHub's base URL; the URL is built with `URLExt.join(baseUrl, 'jupyter-gpu', ...)` exactly
 * like the server registers its routes.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { trans } from './i18n';

/** The namespace of the server extension's routes. */
export const API_NAMESPACE = 'jupyter-gpu';

/**
 * Raised when the endpoint does not exist: the frontend extension is installed but the server
 * extension is not (or is disabled). Its message tells the user what to do about it.
 */
export class ServerExtensionMissingError extends Error {
  constructor(url: string) {
    super(
      trans.__(
        'The jupyter_gpu server extension did not answer at %1. Install jupyter_gpu in the environment that runs Jupyter Server (pip install jupyter_gpu), check that `jupyter server extension list` shows jupyter_gpu enabled, then restart the server.',
        url
      )
    );
    this.name = 'ServerExtensionMissingError';
  }
}

/**
 * Call one route of the server extension and parse its JSON answer.
 *
 * @param endPoint - the route below `jupyter-gpu/`, e.g. `snapshot`.
 * @throws ServerExtensionMissingError on 404, ServerConnection.ResponseError on other failures.
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  if (response.status === 404) {
    throw new ServerExtensionMissingError(url);
  }
  const text = await response.text();
  let data: unknown = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // Not JSON (a proxy's error page): keep the text for the error message below.
    }
  }
  if (!response.ok) {
    const message =
      typeof data === 'object' && data !== null && 'message' in data
        ? String((data as { message: unknown }).message)
        : `${response.status} ${response.statusText}`;
    throw new ServerConnection.ResponseError(response, message);
  }
  return data as T;
}
