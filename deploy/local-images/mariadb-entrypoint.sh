#!/bin/sh
# The MariaDB stand-in's entrypoint (Debian's MariaDB 10.11), for the official mariadb and mysql
# images' roles in docker-compose.yml. Honours, on the first start with an empty
# /var/lib/mysql: MARIADB_ROOT_PASSWORD or MYSQL_ROOT_PASSWORD (root@'%' and root@localhost),
# MARIADB_DATABASE or MYSQL_DATABASE; and, as the official image does, a healthcheck user whose
# credentials /var/lib/mysql/.my-healthcheck.cnf keeps for healthcheck.sh. Other variables of
# the official images (users, time zones, init scripts) are not honoured.
set -eu
[ "${1:-mariadbd}" = mariadbd ] || exec "$@"
[ $# -gt 0 ] && shift
datadir=/var/lib/mysql
password=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
database=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
chown mysql:mysql "$datadir"

if [ ! -d "$datadir/mysql" ]; then
    [ -n "$password" ] || { echo "set MARIADB_ROOT_PASSWORD or MYSQL_ROOT_PASSWORD" >&2; exit 1; }
    mariadb-install-db --user=mysql --datadir="$datadir" --auth-root-authentication-method=normal \
        --skip-test-db >/dev/null
    # Set up without networking: no client sees the server before its users exist.
    mariadbd --user=mysql --datadir="$datadir" --skip-networking --socket=/run/mysqld/init.sock &
    init=$!
    for _ in $(seq 300); do
        mariadb-admin --socket=/run/mysqld/init.sock ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    check=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    sql=$(mktemp)
    # The passwords go to the server on stdin only; the SQL file is removed below.
    quoted=$(printf '%s' "$password" | sed "s/\\\\/\\\\\\\\/g; s/'/\\\\'/g")
    {
        echo "ALTER USER 'root'@'localhost' IDENTIFIED BY '$quoted';"
        echo "CREATE USER 'root'@'%' IDENTIFIED BY '$quoted';"
        echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
        echo "CREATE USER 'healthcheck'@'localhost' IDENTIFIED BY '$check';"
        echo "CREATE USER 'healthcheck'@'127.0.0.1' IDENTIFIED BY '$check';"
        [ -z "$database" ] || echo "CREATE DATABASE IF NOT EXISTS \`$database\`;"
    } >"$sql"
    mariadb --socket=/run/mysqld/init.sock -u root <"$sql"
    rm -f "$sql"
    printf '[mariadb-client]\nport=3306\nsocket=/run/mysqld/mysqld.sock\nuser=healthcheck\npassword=%s\n' "$check" \
        >"$datadir/.my-healthcheck.cnf"
    chown mysql:mysql "$datadir/.my-healthcheck.cnf"
    chmod 600 "$datadir/.my-healthcheck.cnf"
    kill -TERM "$init"
    wait "$init"
fi

exec mariadbd --user=mysql --datadir="$datadir" --bind-address=0.0.0.0 --port=3306 \
    --socket=/run/mysqld/mysqld.sock --skip-name-resolve "$@"
