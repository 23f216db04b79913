#!/bin/sh
# A private CA and one certificate per role for the examples in this directory
# (docs/security.md). Run it where the nodes start: it writes ./pki/.
#
#   sh docs/examples/tls/make-certs.sh [DIR] [HOST...]
#
# DIR defaults to ./pki; every HOST (default 127.0.0.1 and localhost) goes into
# each certificate's subjectAltName, so the same file serves a node as server
# (clients check the host they dial) and as client (servers check its CN = role).
# Roles: meta, pump, drainer, producer, ctl (bridge/tls.py). Certificates last
# 365 days; keys are EC P-256 and readable by their owner only.
set -eu
dir=${1:-pki}
[ $# -gt 0 ] && shift
hosts=${*:-127.0.0.1 localhost}
san=""
for h in $hosts; do
    case $h in
        *[!0-9.]*) san="$san,DNS:$h" ;;
        *) san="$san,IP:$h" ;;
    esac
done
san=${san#,}
mkdir -p "$dir"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
    -subj "/CN=binlog-bridge CA" -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" \
    -addext "basicConstraints=critical,CA:true" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
for role in meta pump drainer producer ctl; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$role" \
        -keyout "$dir/$role-key.pem" -out "$dir/$role.csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:false\n' "$san" \
        > "$dir/$role.ext"
    openssl x509 -req -in "$dir/$role.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial \
        -days 365 -extfile "$dir/$role.ext" -out "$dir/$role.pem" 2>/dev/null
    rm "$dir/$role.csr" "$dir/$role.ext"
done
chmod 644 "$dir"/*.pem
chmod 600 "$dir"/*-key.pem
echo "wrote $dir: ca.pem and {meta,pump,drainer,producer,ctl}{.pem,-key.pem} for $san"
