#!/usr/bin/env bash
# Working copies of example_notebooks/ for scripts/lab.sh, so that using the examples (running them,
# autosave, widget state) never rewrites the checkout: it stays as cloned. A copy is made where there
# is none, and made again only when the checkout's notebook is newer (a `git pull` brought a new
# version); a copy the user changed since is kept.
#   scripts/examples_copy.sh DEST        (prints DEST)
set -euo pipefail
dest=$1
mkdir -p "$dest"
for notebook in example_notebooks/*.ipynb; do
  copy="$dest/$(basename "$notebook")"
  if [ ! -e "$copy" ] || [ "$notebook" -nt "$copy" ]; then
    cp -p "$notebook" "$copy"
    chmod u+w "$copy"
  fi
done
echo "$dest"
