# shellcheck shell=bash
# Certificates of the local cluster, made with openssl. Keys are RSA 2048, certificates SHA-256
# and valid 365 days.

# pki_ca DIR NAME CN: a self-signed CA, DIR/NAME.key and DIR/NAME.crt.
pki_ca() {
  local dir=$1 name=$2 cn=$3
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -sha256 -subj "/CN=$cn" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -keyout "$dir/$name.key" -out "$dir/$name.crt" 2>/dev/null
}

# pki_sign DIR NAME CA SUBJECT [SANS] [USAGE]: DIR/NAME.key and DIR/NAME.crt for SUBJECT, signed
# by the CA whose files are CA.crt and CA.key (a path without the suffix). SANS is an
# openssl subjectAltName value; USAGE the extended key usages (default clientAuth).
pki_sign() {
  local dir=$1 name=$2 ca=$3 subj=$4 sans=${5:-} usage=${6:-clientAuth}
  mkdir -p "$dir"
  openssl genrsa -out "$dir/$name.key" 2048 2>/dev/null
  openssl req -new -key "$dir/$name.key" -subj "$subj" -out "$dir/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -z $sans ]] || echo "subjectAltName=$sans"
  } >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$ca.crt" -CAkey "$ca.key" \
    -CAcreateserial -days 365 -sha256 -extfile "$dir/$name.ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}
