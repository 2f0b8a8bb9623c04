/**
 * Tiny DOM helpers for the plain-DOM widgets.
 *
 * Every string that comes from the server goes through `textContent` (never innerHTML), so a
 * process named `<img onerror=...>` shows as text. The setters skip writes whose value did not
 * change: a poll then touches only what moved, which keeps applying one poll far below a frame.
 */

/** Create an element with a class and optional attributes. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  attrs: Record<string, string> = {}
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, value);
  }
  return node;
}

/** Set an element's text when it differs. */
export function setText(node: Element, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

/** Set (or, with null, remove) an attribute when it differs. */
export function setAttr(node: Element, name: string, value: string | null): void {
  if (value === null) {
    if (node.hasAttribute(name)) {
      node.removeAttribute(name);
    }
  } else if (node.getAttribute(name) !== value) {
    node.setAttribute(name, value);
  }
}

/** Set an inline style property when it differs. */
export function setStyle(node: HTMLElement, property: string, value: string): void {
  if (node.style.getPropertyValue(property) !== value) {
    node.style.setProperty(property, value);
  }
}

/** Show or hide an element (via the `hidden` attribute, which also hides it from assistive tech). */
export function setHidden(node: HTMLElement, hidden: boolean): void {
  if (node.hidden !== hidden) {
    node.hidden = hidden;
  }
}

/**
 * Keep `parent`'s children in the order of `items`, reusing one view per key.
 *
 * Views whose key disappeared are removed (and `dispose`d); new keys get a fresh view.
 */
export function reconcile<T, V extends { node: HTMLElement; dispose?(): void }>(
  parent: HTMLElement,
  views: Map<string, V>,
  items: readonly T[],
  key: (item: T) => string,
  create: (item: T) => V,
  update: (view: V, item: T) => void
): void {
  const seen = new Set<string>();
  let cursor: ChildNode | null = parent.firstChild;
  for (const item of items) {
    const k = key(item);
    seen.add(k);
    let view = views.get(k);
    if (!view) {
      view = create(item);
      views.set(k, view);
    }
    update(view, item);
    if (view.node !== cursor) {
      parent.insertBefore(view.node, cursor);
    } else {
      cursor = cursor.nextSibling;
    }
  }
  for (const [k, view] of views) {
    if (!seen.has(k)) {
      view.node.remove();
      view.dispose?.();
      views.delete(k);
    }
  }
}

/** A button whose action is done: it stays, says what happened, and no longer looks clickable. */
export function markDone(button: HTMLButtonElement, text: string): void {
  button.disabled = true;
  button.textContent = `✓ ${text}`;
  button.classList.remove('jp-mod-accept');
  button.classList.add('jp-mod-done');
}

/** A button whose target is gone: disabled, and its text says why. */
export function markGone(button: HTMLButtonElement, why: string): void {
  button.disabled = true;
  button.textContent = `${button.textContent ?? ''} — ${why}`;
  button.title = why;
  button.classList.add('jp-mod-gone');
}
