#!/usr/bin/env bash
# What a pip install is doing now, in one line that changes as the install moves on (setup.sh prints
# it every 10 s): the package being collected, downloaded or built; while pip unpacks, how many of
# its packages are in the environment and the latest one; while the extension builds, how far npm
# and TypeScript got. Never the same words for minutes ("unpacking 119 packages" seven times).
#   scripts/progress_step.sh LOG VENV SINCE
# LOG: pip's output so far; VENV: the environment installed into; SINCE: a file made when the
# install started (packages unpacked after it are counted). Run from the checkout's root.
set -uo pipefail
log=$1 venv=$2 since=$3

step=$(grep -E '^ *(Collecting|Downloading|Building|Installing|Successfully|Preparing|Getting)' "$log" 2>/dev/null \
       | tail -n 1 | sed -e 's/^ *//' | cut -c1-90)
case "$step" in
  "Preparing editable metadata"*|"Building editable for jupyter_gpu"*|"Building wheel for jupyter_gpu"*)
    npm=$(find labextension/node_modules -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    compiled=$(find labextension/lib -name '*.js' 2>/dev/null | wc -l)
    step="building jupyter_gpu's JupyterLab extension: $npm npm packages in place, $compiled modules compiled" ;;
  "Installing collected packages:"*)
    total=$(grep '^Installing collected packages:' "$log" | tail -n 1 | tr -cd , | wc -c | awk '{print $1 + 1}')
    unpacked=$(find "$venv"/lib/python*/site-packages -maxdepth 1 -name '*.dist-info' -newer "$since" 2>/dev/null \
               | wc -l)
    latest=$(ls -td "$venv"/lib/python*/site-packages/*.dist-info 2>/dev/null | head -n 1)
    latest=$(basename "${latest:-}" .dist-info 2>/dev/null | sed -E 's/-[^-]+$//')
    step="unpacking into .venv: $unpacked of $total packages${latest:+ (latest: $latest)}" ;;
esac
echo "${step:-starting}"
