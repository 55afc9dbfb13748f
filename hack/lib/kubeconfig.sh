# shellcheck shell=bash
# Kubeconfigs for the local cluster's clients, written with the pinned kubectl ($BIN/kubectl).

# write_kubeconfig FILE SERVER TLS_SERVER_NAME CA USER CREDENTIAL_FLAGS...: one context, local,
# for USER at SERVER, trusting the CA file CA (embedded); TLS_SERVER_NAME, unless empty, is the
# name to check in the server's certificate when SERVER is an address the certificate lacks.
# CREDENTIAL_FLAGS are kubectl config set-credentials flags.
write_kubeconfig() {
  local file=$1 server=$2 server_name=$3 ca=$4 user=$5
  shift 5
  local cluster=(--server "$server" --certificate-authority "$ca" --embed-certs)
  [[ -z $server_name ]] || cluster+=(--tls-server-name "$server_name")
  "$BIN/kubectl" --kubeconfig "$file" config set-cluster local "${cluster[@]}" >/dev/null
  "$BIN/kubectl" --kubeconfig "$file" config set-credentials "$user" "$@" >/dev/null
  "$BIN/kubectl" --kubeconfig "$file" config set-context local --cluster local --user "$user" >/dev/null
  "$BIN/kubectl" --kubeconfig "$file" config use-context local >/dev/null
}
