"""Sentences that travel inside data: English there, in the user's language where a person reads them.

A snapshot's ``error`` and ``warnings``, a GPU's ``error`` and the host sample's ``source_note`` are
data: ``--json``, the server's and the hub's answers carry them, and other processes (a kernel
reading its server's answer, the sidebar) receive them already written. So the writer keeps them
English, filled from one of the marked templates below, and a face that shows one passes it through
:func:`shown`: a sentence made from a known template is recognized again, its fields taken back, and
the template's translation filled with them. A field that is itself a known sentence (a scenario
refusal inside "simulated GPUs could not be set up: ...") is translated too; a driver's own words
(NVML's error string), a path or a URL stay as they are. Text that matches no template (another
program's, an older version's) is shown unchanged. Like :func:`jupyter_gpu.core.availability.label`
for single words, and ``doctor.report.Finding`` / the host sample's ``shown_note`` where the writer
itself shows the sentence.

Adding a sentence: write it here with ``N_`` (named placeholders, each field a whole value), use the
constant where the data is written (``TEMPLATE.format(...)``), and list it in :data:`KNOWN`.
"""

from __future__ import annotations

import functools
import re

from .i18n import N_, SOURCE_LANGUAGE, _, language

# -- NVML (sources/nvml.py)

NVML_NOT_INSTALLED = N_("nvidia-ml-py is not installed (pip install nvidia-ml-py); GPUs cannot be read")
NVML_MISMATCH = N_(
    "the installed nvidia-ml-py expects a newer NVIDIA driver than this machine has "
    "(NVMLLibraryMismatchError): upgrade the driver or install an older nvidia-ml-py"
)
NVML_ERROR = N_("NVML error: {error}")
"""An NVML error without an explanation of ours: ``{error}`` is NVML's own words."""
#: NVML error codes -> a sentence a person can act on, ending with NVML's own words (``{error}``).
NVML_EXPLANATIONS: dict[int, str] = {
    12: N_(
        "the NVIDIA driver library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed "
        "on this machine, or the library is not on the loader's path (NVML: {error})"
    ),
    9: N_(
        "the NVIDIA driver is not loaded: the kernel module is missing or failed to load (see dmesg) (NVML: {error})"
    ),
    4: N_(
        "no permission to talk to the NVIDIA driver: check the permissions of /dev/nvidia* for this user "
        "(NVML: {error})"
    ),
    18: N_(
        "the NVIDIA driver's kernel module and user-space library have different versions: "
        "reboot or reload the driver after an upgrade (NVML: {error})"
    ),
    15: N_("GPU is lost: it fell off the bus or needs a reset (see nvidia-smi and dmesg) (NVML: {error})"),
    1: N_("NVML is not initialized (NVML: {error})"),
}
GPU_NOT_OPENED = N_("could not be opened")
SIMULATION_FAILED = N_("simulated GPUs could not be set up: {error}")

# -- the simulated scenario (simulate/)

SCENARIO_REJECTED = N_("simulated scenario rejected: {error} (keeping the last good scenario)")
SCENARIO_COUNT_ONE = N_(
    "simulated scenario now has {now} GPU; this process keeps its {fixed} until it restarts "
    "(a process's GPUs are counted once, when it starts NVML: the missing ones read as lost)"
)
SCENARIO_COUNT_FEWER = N_(
    "simulated scenario now has {now} GPUs; this process keeps its {fixed} until it restarts "
    "(a process's GPUs are counted once, when it starts NVML: the missing ones read as lost)"
)
SCENARIO_COUNT_MORE_ONE = N_(
    "simulated scenario now has {now} GPU; this process keeps its {fixed} until it restarts "
    "(a process's GPUs are counted once, when it starts NVML)"
)
SCENARIO_COUNT_MORE = N_(
    "simulated scenario now has {now} GPUs; this process keeps its {fixed} until it restarts "
    "(a process's GPUs are counted once, when it starts NVML)"
)
SCENARIO_SETTING = N_("{variable}={value}: {error}")
"""A refused ``JUPYTER_GPU_SIMULATE``: the variable as set, and why (translated alike: a frame)."""
SCENARIO_AT_PATH = N_("{path}: {error}")
"""A refused scenario file: its path, and why (translated alike: a frame)."""
SCENARIO_COUNT_RANGE = N_(
    "{variable}={value}: the number of simulated GPUs must be 1 to {most} "
    "(unset the variable, or set it to 0, to read the real GPUs)"
)
SCENARIO_NO_FILE = N_(
    "{variable}={value}: expected a number of GPUs (1 to {most}), 'demo', or the path of a JSON scenario "
    "file ('{still}': the demo standing still), and no such file exists (unset it, or set it to 0, for the real GPUs)"
)
SCENARIO_TOO_LARGE = N_("the file is larger than {mib} MiB")
SCENARIO_REFUSED = N_("refused, another user could have written it: {reason}")
"""``{reason}``: who could have (:func:`jupyter_gpu.core.files.others_can_replace`'s words)."""
SCENARIO_REFUSED_LINK = N_(
    "refused, another user could have written it: the link {link} is owned by {owner}, not by you or root"
)
SCENARIO_OWNED = N_("refused, another user could have written it: it is owned by {owner}, not by you or root")
SCENARIO_REPLACED = N_("refused, another user could have written it: a link was put in its place")
SCENARIO_NOT_REGULAR = N_("not a regular file")
SCENARIO_UNREADABLE = N_("cannot be read ({reason})")
SCENARIO_NOT_JSON = N_("not valid JSON ({reason})")

# -- where the host's sample came from (sources/host.py, sources/remote.py)

SERVER_WITHOUT_EXTENSION = N_("the Jupyter server at {url} runs without the jupyter_gpu extension")
SERVER_FAILED = N_("the Jupyter server at {url} did not answer usably ({reason})")
SERVER_SEES_SIMULATED = N_("the Jupyter server at {url} sees simulated GPUs and this process would read the real ones")
SERVER_SEES_REAL = N_("the Jupyter server at {url} sees real GPUs and this process simulates {world} ({variable})")
SERVER_OTHER_WORLD = N_(
    "the Jupyter server at {url} simulates {theirs} and this process simulates {world} ({variable})"
)
NO_SERVER_ANSWERED = N_("no Jupyter server of this user answered")
NO_SERVICE_NAMED = N_("no hub service is named ($JUPYTER_GPU_SERVICE_URL is not set)")
SERVICE_SILENT = N_("the jupyter-gpu service at {url} did not answer")
CHOSEN_SILENT = N_("{why} (--source {source})")
CHOSEN_SILENT_BECAUSE = N_("{why} (--source {source}): {reasons}")
SERVICE_NOT_ASKED = N_(
    "the jupyter-gpu service ({url}) was not asked: {reason}. This server reads NVML itself until the "
    "service's own account answers there"
)
SERVICE_UNREACHABLE = N_(
    "the jupyter-gpu service ({url}) is unreachable ({reason}): this server reads NVML itself until it answers again"
)
LOCAL_NOTE = N_("NVML read locally (--source local)")
NOTHING_ANSWERED_NOTE = N_("NVML read locally: no Jupyter server or hub service answered")
LOCAL_BECAUSE_NOTE = N_("NVML read locally: {reasons}")
SERVICE_NOTE = N_("from the jupyter-gpu service at {url}")
CHOSEN_SERVICE_NOTE = N_("from the jupyter-gpu service at {url} (--source hub)")
SERVER_NOTE = N_("from the Jupyter server at {url}")

# -- which GPU is which for CUDA (core/visibility.py: DeviceMap.reason, in doctor's JSON too)

CUDA_FASTEST_FIRST = N_(
    "CUDA_DEVICE_ORDER was not PCI_BUS_ID when CUDA started, so CUDA numbered the {count} GPUs of "
    "{kinds} models ({models}) fastest first, an order NVML does not tell"
)
CUDA_COUNTS_IN_ORDER = N_("CUDA_VISIBLE_DEVICES={value} counts GPUs in that order: {why}")
FRAMEWORK_NOT_ONE_MIG = N_("the framework lists {count} GPU(s), not the one MIG device CUDA shows")
FRAMEWORK_LISTS_OTHER = N_(
    "the framework lists {count} GPU(s) ({listed}), not the {named} that the CUDA variables name"
)
FRAMEWORK_LISTS_NONE = N_("the framework lists no GPU, not the {named} that the CUDA variables name")

# -- a field of checked data: a simulated scenario's (simulate/scenario.py) and any JSON's (core.wire)
#: ``{field}`` is the field's path as the data writes it (``gpus[0].memory_used_mib``): it stays as it is.

FIELD_NOT_OBJECT = N_("{field} must be a JSON object")
FIELD_UNKNOWN_KEY = N_("{field} is not a scenario key; known keys: {keys}")
FIELD_NOT_NUMBER = N_("{field} must be a number, not {kind}")
FIELD_NOT_FINITE = N_("{field} must be a finite number")
FIELD_AT_LEAST = N_("{field} must be >= {low}")
FIELD_AT_MOST = N_("{field} must be <= {high}")
FIELD_NOT_WHOLE = N_("{field} must be a whole number, not {kind}")
FIELD_NOT_STRING = N_("{field} must be a string, not {kind}")
FIELD_TOO_LONG = N_("{field} must be at most {most} characters")
FIELD_NUL = N_("{field} must not contain NUL characters")
FIELD_SURROGATES = N_("{field} must not contain lone surrogates (not UTF-8)")
FIELD_NAME_BYTES = N_("{field} must be at most {most} bytes in UTF-8 (NVML's {buffer}-byte name, {marker} included)")
FIELD_UNKNOWN_FAULT = N_("{field}: unknown fault {value}; choose one of {choices} or null")
FIELD_NOT_STRINGS = N_("{field} must be a list of strings")
FIELD_CANNOT_MARK = N_("{field}: cannot mark {refused} {what}; choose from {allowed}")
FIELD_NOT_LIST = N_("{field} must be a list, not {kind}")
FIELD_TOO_MANY = N_("{field} must have at most {limit} entries")
FIELD_REQUIRED = N_("{field} is required")
FIELD_NOT_ONE_OF = N_("{field} must be one of {choices}, not {value}")
KIND_STRING = N_("a string")
KIND_LIST = N_("a list")
KIND_OBJECT = N_("an object")
#: What a JSON value is (``{kind}``); ``null`` and ``true/false`` are JSON's own words.
KINDS: dict[type, str] = {bool: "true/false", type(None): "null", str: KIND_STRING, list: KIND_LIST, dict: KIND_OBJECT}

# -- a simulated scenario's own rules (simulate/scenario.py, simulate/presets.py)

SCENARIO_NEGATIVE_COUNT = N_("the number of simulated GPUs cannot be negative")
SCENARIO_PROCESSES_WITH_MIG = N_(
    "{field} must be empty when mig_slices is given: on a GPU in MIG mode every process runs in a slice "
    "(list it under its slice)"
)
SCENARIO_USED_WITH_MOTION = N_(
    "{field} cannot be given when a process's memory moves (the GPU's used memory then follows its processes)"
)
SCENARIO_USED_PLUS_RESERVED = N_(
    "{field} ({used}) plus memory_reserved_mib ({reserved}) exceeds memory_total_mib ({total})"
)
SCENARIO_PEAKS_EXCEED = N_(
    "{field}: its processes' memory can reach {peak} MiB (the peaks of their motion, jitter included), "
    "which with memory_reserved_mib ({reserved}) exceeds memory_total_mib ({total})"
)
SCENARIO_MIG_NAME_TOO_LONG = N_("{field}: the MIG device's name \"{name}\" does not fit NVML's {buffer}-byte name")
SCENARIO_NO_POINTS = N_("{field} must hold at least one [seconds, value] pair")
SCENARIO_NOT_PAIR = N_("{field} must be a [seconds, value] pair, not {kind}")
SCENARIO_NOT_LATER = N_("{field} must be later than the point before it")
SCENARIO_LOOP_SHORT = N_("{field} ({loop}) must be >= the last point's seconds of {name}")
SCENARIO_BUS_ID = N_('{field} must look like "00000000:17:00.0" (domain:bus:device.function)')
SCENARIO_PROFILE_REQUIRED = N_('{field} is required (e.g. "1g.10gb")')
SCENARIO_PROFILE_NAME = N_('{field} must be a profile name such as "1g.10gb" (1 to 32 characters)')
SCENARIO_MIG_NO_MOTION = N_("{field}: a process's memory cannot move in a MIG slice (only on a whole GPU)")
SCENARIO_MIG_TOTAL_REQUIRED = N_('{field} is required when the profile does not end in "<n>gb"')
SCENARIO_SLICE_EXCEEDS = N_("{field}: its processes' memory ({used} MiB) exceeds memory_total_mib ({total})")
SCENARIO_MIG_UUID = N_(
    '{field} must start with "MIG-" and hold no spaces or commas (at most 80 characters, NVML\'s UUID buffer)'
)
SCENARIO_UUID_TAKEN = N_("{field} {uuid} is used by another slice")
SCENARIO_IDS_TAKEN = N_(
    "{field}: gpu_instance_id {gpu_instance} with compute_instance_id {compute_instance} is used by another slice"
)
SCENARIO_INSTANCES_EXCEED = N_(
    "{field}: the GPU instances' memory ({used} MiB) exceeds the GPU's memory_total_mib less "
    "memory_reserved_mib ({room})"
)

# -- JSON from elsewhere (core.wire: a Jupyter server's, the hub service's, a kernel's report)

WIRE_TOO_DEEP = N_("nested too deeply (more than {levels} levels)")
WIRE_NESTED = N_("nested too deeply")
WIRE_NOT_A_NUMBER = N_("{name} is not a number (JSON has finite numbers only)")
WIRE_NUMBER_TOO_LARGE = N_("the number {literal} is too large")
WIRE_KEY_TWICE = N_("the key {key} appears twice in one object")
WIRE_SURROGATES = N_("the text holds lone surrogates (not UTF-8)")
WIRE_NOT_UTF8 = N_("not UTF-8 (byte {position})")
WIRE_TOO_LARGE = N_("larger than {most} bytes")
WIRE_NOT_JSON = N_("not JSON ({reason} at character {position})")
"""``{reason}``: Python's json module's own words (``Expecting value``)."""
WIRE_HUGE_INTEGER = N_("not usable JSON (an integer of more digits than Python reads)")
FIELD_WHOLE_IN_RANGE = N_("{field} must be a whole number in {low}..{high}, not {kind}")
FIELD_FINITE_IN_RANGE = N_("{field} must be a finite number in {low}..{high}, not {kind}")
FIELD_NOT_FINITE_NUMBER = N_("{field} must be a finite number, not {kind}")
FIELD_DOUBLE_RANGE = N_("{field} must be a finite number within a double's range")
FIELD_STRING_LENGTH = N_("{field} must be a string of {least}..{most} characters, not {kind}")
FIELD_NOT_AN_OBJECT = N_("{field} is not a JSON object ({kind})")
FIELD_MISSING = N_("{field} is missing")
FIELD_NOT_BOOL = N_("{field} must be true or false, not {kind}")
FIELD_LIST_TOO_LONG = N_("{field} must be a list of at most {most} entries, not {kind}")
FIELD_OBJECT_TOO_LARGE = N_("{field} must be an object of at most {most} entries, not {kind}")
FIELD_KEYS_TOO_LONG = N_("{field} keys must have at most {most} characters")
KIND_BIG_INTEGER = N_("an integer of {bits} bits")

#: Every template :func:`shown` recognizes.
KNOWN: tuple[str, ...] = (
    NVML_NOT_INSTALLED,
    NVML_MISMATCH,
    NVML_ERROR,
    *NVML_EXPLANATIONS.values(),
    GPU_NOT_OPENED,
    SIMULATION_FAILED,
    SCENARIO_REJECTED,
    SCENARIO_COUNT_ONE,
    SCENARIO_COUNT_FEWER,
    SCENARIO_COUNT_MORE,
    SCENARIO_COUNT_MORE_ONE,
    SCENARIO_SETTING,
    SCENARIO_AT_PATH,
    SCENARIO_COUNT_RANGE,
    SCENARIO_NO_FILE,
    SCENARIO_TOO_LARGE,
    SCENARIO_REFUSED,
    SCENARIO_REFUSED_LINK,
    SCENARIO_OWNED,
    SCENARIO_REPLACED,
    SCENARIO_NOT_REGULAR,
    SCENARIO_UNREADABLE,
    SCENARIO_NOT_JSON,
    SERVER_WITHOUT_EXTENSION,
    SERVER_FAILED,
    SERVER_SEES_SIMULATED,
    SERVER_SEES_REAL,
    SERVER_OTHER_WORLD,
    NO_SERVER_ANSWERED,
    NO_SERVICE_NAMED,
    SERVICE_SILENT,
    CHOSEN_SILENT,
    CHOSEN_SILENT_BECAUSE,
    SERVICE_NOT_ASKED,
    SERVICE_UNREACHABLE,
    LOCAL_NOTE,
    NOTHING_ANSWERED_NOTE,
    LOCAL_BECAUSE_NOTE,
    SERVICE_NOTE,
    CHOSEN_SERVICE_NOTE,
    SERVER_NOTE,
    CUDA_FASTEST_FIRST,
    CUDA_COUNTS_IN_ORDER,
    FRAMEWORK_NOT_ONE_MIG,
    FRAMEWORK_LISTS_OTHER,
    FRAMEWORK_LISTS_NONE,
    FIELD_NOT_OBJECT,
    FIELD_UNKNOWN_KEY,
    FIELD_NOT_NUMBER,
    FIELD_NOT_FINITE,
    FIELD_AT_LEAST,
    FIELD_AT_MOST,
    FIELD_NOT_WHOLE,
    FIELD_NOT_STRING,
    FIELD_TOO_LONG,
    FIELD_NUL,
    FIELD_SURROGATES,
    FIELD_NAME_BYTES,
    FIELD_UNKNOWN_FAULT,
    FIELD_NOT_STRINGS,
    FIELD_CANNOT_MARK,
    FIELD_NOT_LIST,
    FIELD_TOO_MANY,
    FIELD_REQUIRED,
    FIELD_NOT_ONE_OF,
    KIND_STRING,
    KIND_LIST,
    KIND_OBJECT,
    SCENARIO_NEGATIVE_COUNT,
    SCENARIO_PROCESSES_WITH_MIG,
    SCENARIO_USED_WITH_MOTION,
    SCENARIO_USED_PLUS_RESERVED,
    SCENARIO_PEAKS_EXCEED,
    SCENARIO_MIG_NAME_TOO_LONG,
    SCENARIO_NO_POINTS,
    SCENARIO_NOT_PAIR,
    SCENARIO_NOT_LATER,
    SCENARIO_LOOP_SHORT,
    SCENARIO_BUS_ID,
    SCENARIO_PROFILE_REQUIRED,
    SCENARIO_PROFILE_NAME,
    SCENARIO_MIG_NO_MOTION,
    SCENARIO_MIG_TOTAL_REQUIRED,
    SCENARIO_SLICE_EXCEEDS,
    SCENARIO_MIG_UUID,
    SCENARIO_UUID_TAKEN,
    SCENARIO_IDS_TAKEN,
    SCENARIO_INSTANCES_EXCEED,
    WIRE_TOO_DEEP,
    WIRE_NESTED,
    WIRE_NOT_A_NUMBER,
    WIRE_NUMBER_TOO_LARGE,
    WIRE_KEY_TWICE,
    WIRE_SURROGATES,
    WIRE_NOT_UTF8,
    WIRE_TOO_LARGE,
    WIRE_NOT_JSON,
    WIRE_HUGE_INTEGER,
    FIELD_WHOLE_IN_RANGE,
    FIELD_FINITE_IN_RANGE,
    FIELD_NOT_FINITE_NUMBER,
    FIELD_DOUBLE_RANGE,
    FIELD_STRING_LENGTH,
    FIELD_NOT_AN_OBJECT,
    FIELD_MISSING,
    FIELD_NOT_BOOL,
    FIELD_LIST_TOO_LONG,
    FIELD_OBJECT_TOO_LARGE,
    FIELD_KEYS_TOO_LONG,
    KIND_BIG_INTEGER,
)

JOINER = "; "
"""How several reasons are joined in one sentence (``{reasons}``); each is recognized on its own."""
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: A known sentence inside a known sentence inside one, and a known word in that (a scenario file's
#: refusal: "simulated scenario rejected: PATH: FIELD must be a number, not a string"): enough for
#: every writer above.
_DEPTH = 4


def said(template: str, **fields: object) -> tuple[str, str]:
    """One marked template filled in English (the data's) and in the user's language (a face's)."""
    return template.format(**fields), _(template).format(**fields)


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Each template as a pattern taking its fields back; the most literal text first (the most
    specific: ``NVML error: {error}`` is tried after every explanation that also starts with words)."""
    compiled = []
    for template in KNOWN:
        parts, seen, literal = [], set(), 0
        position = 0
        for match in _FIELD.finditer(template):
            text = template[position : match.start()].replace("{{", "{").replace("}}", "}")
            literal += len(text)
            parts.append(re.escape(text))
            name = match.group(1)
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+?)")
            seen.add(name)
            position = match.end()
        tail = template[position:].replace("{{", "{").replace("}}", "}")
        literal += len(tail)
        parts.append(re.escape(tail))
        compiled.append((literal, template, re.compile("".join(parts), re.DOTALL)))
    compiled.sort(key=lambda item: -item[0])
    return tuple((template, pattern) for _literal, template, pattern in compiled)


def shown(text: str | None, depth: int = _DEPTH) -> str | None:
    """``text`` in the user's language when it is one of the :data:`KNOWN` sentences (its fields
    kept, a known one among them translated too), else ``text`` as it is. English: unchanged.

    Show the result through :func:`jupyter_gpu.core.text.display_text` as any text from data."""
    if text is None or language() == SOURCE_LANGUAGE:
        return text
    return _translated(text, depth)


def _translated(text: str, depth: int) -> str:
    for template, pattern in _patterns():
        match = pattern.fullmatch(text)
        if match is None:
            continue
        fields = match.groupdict()
        if depth > 1:
            fields = {name: _translated(value, depth - 1) for name, value in fields.items()}
        return _(template).format(**fields)
    if depth > 1 and JOINER in text:
        parts = text.split(JOINER)
        translated = [_translated(part, depth - 1) for part in parts]
        if translated != parts:
            return _(JOINER).join(translated)
    return text
