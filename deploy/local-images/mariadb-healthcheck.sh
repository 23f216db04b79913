#!/bin/sh
# The MariaDB stand-in's healthcheck.sh, for the tests docker-compose.yml asks of the official
# image: --connect (a TCP connection, which the set-up's --skip-networking server refuses) and
# --innodb_initialized (InnoDB answers). Credentials: the healthcheck user the entrypoint made.
set -eu
client() {
    mariadb --defaults-extra-file=/var/lib/mysql/.my-healthcheck.cnf --protocol=tcp -h 127.0.0.1 \
        --connect-timeout=3 -N -B -e "$1"
}
for test in "$@"; do
    case $test in
        --connect) client 'SELECT 1' >/dev/null ;;
        --innodb_initialized)
            [ "$(client "SELECT 1 FROM information_schema.ENGINES WHERE engine = 'InnoDB' AND support IN ('YES', 'DEFAULT')")" = 1 ] ;;
        *) echo "healthcheck.sh: $test is not supported by the stand-in" >&2; exit 1 ;;
    esac
done
