#!/usr/bin/env bash
# Certificates for local TLS clusters, made with openssl: a CA, a broker
# certificate and a client certificate, all ECDSA P-256, in DIR.
#
#   scripts/dev-certs.sh DIR [NAME ...]
#
#   DIR/ca.pem, ca.key          the CA: brokers and clients trust ca.pem
#                               (corelogd --tls-client-ca, corelog --tls-ca)
#   DIR/broker.pem, broker.key  for every broker (corelogd --tls-cert,
#                               --tls-key), naming localhost, 127.0.0.1 and
#                               each NAME (host names or IP addresses the
#                               brokers are reached by)
#   DIR/client.pem, client.key  a client certificate (CN "client"), for
#                               brokers with --tls-client-auth
#
# An existing CA is kept, so that certificates issued again (for new NAMEs,
# or to rotate them: then SIGHUP the brokers) stay trusted; delete DIR to
# start over. For development only: the CA key lies beside the
# certificates, unencrypted. Certificates are valid for DAYS days (365).
set -euo pipefail

dir=${1:?usage: scripts/dev-certs.sh DIR [NAME ...]}
shift
days=${DAYS:-365}
command -v openssl >/dev/null 2>&1 || {
    echo "dev-certs: openssl is missing; install it: apt-get install openssl" >&2
    exit 1
}
mkdir -p "$dir"
umask 077

new_key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

if [ ! -s "$dir/ca.pem" ] || [ ! -s "$dir/ca.key" ]; then
    new_key "$dir/ca.key"
    openssl req -x509 -new -key "$dir/ca.key" -days "$((days * 10))" -subj "/CN=corelog dev CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$dir/ca.pem"
fi

# issue NAME CN EXTENDED_KEY_USAGE SUBJECT_ALT_NAMES
issue() {
    local name=$1 cn=$2 usage=$3 sans=$4 extensions
    extensions=$(mktemp)
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$usage"
        [ -z "$sans" ] || echo "subjectAltName=$sans"
    } > "$extensions"
    new_key "$dir/$name.key"
    openssl req -new -key "$dir/$name.key" -subj "/CN=$cn" -out "$dir/$name.csr"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days "$days" -extfile "$extensions" -out "$dir/$name.pem" 2>/dev/null
    rm -f "$dir/$name.csr" "$extensions"
}

sans="DNS:localhost,IP:127.0.0.1"
for name in "$@"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then
        sans="$sans,IP:$name"
    else
        sans="$sans,DNS:$name"
    fi
done
# Brokers present broker.pem to clients and to each other (as clients too).
issue broker "corelog broker" "serverAuth,clientAuth" "$sans"
issue client client clientAuth ""
# Certificates are public; keys stay readable by their owner only.
chmod 644 "$dir"/*.pem
echo "dev-certs: CA, broker and client certificates in $dir (broker names: $sans); valid $days days"
