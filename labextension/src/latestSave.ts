/**
 * Saves of one setting in the order they were asked for, the last one winning.
 *
 * `ISettings.set` is a request to the server; two quick clicks on the sidebar's Compact button
 * sent two, and on a loaded server the first could land after the second, leaving the setting at
 * the value the user clicked away from. A `LatestSave` has at most one save in flight: a value
 * asked for meanwhile waits until that save settled (resolved or failed), and only the latest of
 * the values that waited is saved then.
 */
export class LatestSave<T> {
  /**
   * @param save - writes one value (e.g. `value => settings.set('compactView', value)`).
   * @param onError - told of a save that failed (the next waiting value is saved all the same).
   */
  constructor(
    private readonly _save: (value: T) => Promise<unknown>,
    private readonly _onError: (reason: unknown) => void = () => undefined
  ) {}

  /** True while a save is in flight or a value waits for one: what the setting reads now may be
   * an earlier value than the one asked for last (a settings "changed" echo to ignore). */
  get busy(): boolean {
    return this._inFlight !== null;
  }

  /** Save `value` after the save in flight, if any; a later `set` before then replaces it. */
  set(value: T): void {
    if (this._inFlight !== null) {
      this._waiting = { value };
      return;
    }
    this._start(value);
  }

  /** Settles once nothing is in flight or waiting (for tests and shutdown). */
  async settled(): Promise<void> {
    while (this._inFlight !== null) {
      await this._inFlight;
    }
  }

  private _start(value: T): void {
    let run: Promise<unknown>;
    try {
      run = this._save(value);
    } catch (reason) {
      run = Promise.reject(reason);
    }
    this._inFlight = run
      .catch(reason => this._onError(reason))
      .then(() => {
        const next = this._waiting;
        this._waiting = null;
        this._inFlight = null;
        if (next !== null) {
          this._start(next.value);
        }
      });
  }

  private _inFlight: Promise<void> | null = null;
  private _waiting: { value: T } | null = null;
}
