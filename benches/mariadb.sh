# Sourced by the benches that need a database: a private MariaDB server (Debian's
# package) in a temporary directory, listening on loopback of one network namespace,
# every commit durable (innodb_flush_log_at_trx_commit=1), with a user `sb` (password
# `sbpass`) owning a database `sb`. Nothing touches the system's service.
#
#   start_mariadb <namespace> <directory> <port>   # sets db_pid; stop it with kill
#   db_sql "<statements>"                          # as root, over the socket

start_mariadb() {
  local ns=$1 port=$3
  db="$2"
  mkdir -p "$db"
  mariadb-install-db --no-defaults --datadir="$db/data" --user=root \
    --auth-root-authentication-method=normal >/dev/null
  ip netns exec "$ns" mariadbd --no-defaults --datadir="$db/data" --socket="$db/sock" \
    --port="$port" --bind-address=127.0.0.1 --user=root --skip-log-bin --skip-name-resolve \
    --innodb-flush-log-at-trx-commit=1 --max-connections=200 >"$db/log" 2>&1 &
  db_pid=$!
  for _ in $(seq 100); do db_sql 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
  db_sql "CREATE USER 'sb'@'%' IDENTIFIED BY 'sbpass'; CREATE DATABASE sb; GRANT ALL ON sb.* TO 'sb'@'%';"
}

db_sql() { mariadb --no-defaults -S "$db/sock" -uroot -e "$1"; }
