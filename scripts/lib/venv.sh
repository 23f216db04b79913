# shellcheck shell=bash
# Sourced by scripts/test and scripts/run: make .venv and install the project.
#
#   bridge_venv        create $VENV with Python 3.11/3.12 unless it exists; put it on PATH
#   bridge_install     pip install -e '.[dev]' unless pyproject.toml and the top-level packages
#                      are unchanged since the last one
#
# Both print on stdout what they did; before a step that takes a while (making the
# venv, pip install) they say on stderr what they are doing. Failures print the pip
# log tail and return non-zero. Expects ROOT (the repo) to be set.

VENV=${BRIDGE_VENV:-$ROOT/.venv}
STAMP=$VENV/.bridge-installed

# A python whose version pyproject's requires-python (>=3.11,<3.13) accepts.
bridge_find_python() {
    local candidate
    for candidate in python3.11 python3.12 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 13))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# Prints what it did: "exists (...)" or "created with ...".
bridge_venv() {
    local python
    if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
        echo "exists ($("$VENV/bin/python" -V))"
    else
        python=$(bridge_find_python) || {
            echo "need Python 3.11 or 3.12 (python3.11, python3.12 or python3)" >&2
            return 1
        }
        rm -rf "$VENV" # a venv whose interpreter is gone cannot be repaired in place
        echo "creating $VENV with $python (about 20 s)" >&2
        "$python" -m venv "$VENV"
        echo "created with $("$VENV/bin/python" -V)"
    fi
    export VIRTUAL_ENV=$VENV
    export PATH="$VENV/bin:$PATH"
}

# Prints "up to date ..." or "installed"; the stamp records what the last
# successful install was made from.
bridge_install() {
    local want_stamp log=$VENV/pip-install.log
    # An editable install maps the top-level packages that existed when it ran,
    # so a new package (a new */__init__.py) needs a reinstall too.
    want_stamp="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
    want_stamp="$want_stamp $(cd "$ROOT" && echo */__init__.py) $("$VENV/bin/python" -V 2>&1)"
    if [[ -f $STAMP && $(<"$STAMP") == "$want_stamp" ]]; then
        echo "up to date (pyproject.toml unchanged since the last install)"
        return 0
    fi
    rm -f "$STAMP"
    echo "installing binlog-bridge and its dependencies into $VENV (pip, about a minute; log: $log)" >&2
    if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip &&
        "$VENV/bin/python" -m pip install --disable-pip-version-check -e "${ROOT}[dev]"; } >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "pip install failed (full log: $log)" >&2
        return 1
    fi
    printf '%s\n' "$want_stamp" >"$STAMP"
    echo "installed"
}
