#!/bin/bash
# ceph-up.sh — a throw-away single-node Ceph (one mon, one OSD, one radosgw) on 127.0.0.1 whose S3
# gateway the tests use. Data is disposable: a stale or broken instance is rebuilt from scratch.
#
# Everything (config, mon/osd data, logs, sockets, pid files) lives in $DIR. Idempotent: when the
# recorded daemons are alive and S3 answers with our keys, it only prints the env again.
# On success it prints export lines (endpoint and keys) on stdout and writes them to $DIR/s3.env.
#
# Usage:   eval "$(scripts/services/ceph-up.sh)"      ...      scripts/services/ceph-down.sh
# Env:
#   STOREKIT_CEPH_DIR   runtime dir  [<repo>/.services/ceph]
#   RGW_PORT            S3 port [7480]         CEPH_MON_PORT   mon port (msgr2) [3300]
#   S3_ACCESS_KEY / S3_SECRET_KEY  the S3 user's keys [testkey / testsecret]
#   CEPH_OBJECTSTORE    bluestore (sparse file $DIR/osd.0.block) | memstore (RAM) [bluestore]
#   CEPH_OSD_SIZE_GB    size of the block file / memstore cap [10]
# Prereq (Debian 12): apt-get install --no-install-recommends ceph-mon ceph-osd radosgw ceph-common curl
set -euo pipefail
SVC_NAME=ceph-up
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=$(realpath -m "${STOREKIT_CEPH_DIR:-$REPO_ROOT/.services/ceph}")
MON_PORT=${CEPH_MON_PORT:-3300}
RGW_PORT=${RGW_PORT:-7480}
AK=${S3_ACCESS_KEY:-testkey}
SK=${S3_SECRET_KEY:-testsecret}
REGION=us-east-1
STORE=${CEPH_OBJECTSTORE:-bluestore}
SIZE_GB=${CEPH_OSD_SIZE_GB:-10}
ENDPOINT=http://127.0.0.1:$RGW_PORT
CONF=$DIR/ceph.conf
export CEPH_CONF=$CONF # also marks our daemons: ceph-down.sh checks it in /proc/PID/environ

die() {
  svc_log "ERROR: $*"
  for f in "$DIR"/log/*.out; do [ -s "$f" ] && { echo "--- tail $f" >&2; tail -n 8 "$f" >&2; }; done
  echo "(full logs: $DIR/log/)" >&2
  "$SERVICES_HERE/ceph-down.sh" >&2 || true
  exit 1
}

for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph curl setsid timeout; do
  command -v "$b" >/dev/null || die "$b not found; install: apt-get install --no-install-recommends ceph-mon ceph-osd radosgw ceph-common curl"
done
[ "$(id -u)" = 0 ] || die "must run as root"
case $STORE in bluestore | memstore) ;; *) die "CEPH_OBJECTSTORE must be bluestore or memstore, not $STORE" ;; esac

# s3 CURL-ARGS...: a SigV4-signed request with our keys. RGW insists on x-amz-content-sha256,
# which curl's --aws-sigv4 does not send by itself.
s3() {
  curl -fsS --max-time 10 --aws-sigv4 "aws:amz:$REGION:s3" --user "$AK:$SK" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
write_env() {
  {
    echo "export STOREKIT_TEST_S3_ENDPOINT=$ENDPOINT"
    echo "export STOREKIT_TEST_S3_KEY=$AK"
    echo "export STOREKIT_TEST_S3_SECRET=$SK"
    echo "export S3_ENDPOINT_URL=$ENDPOINT"
    echo "export AWS_ACCESS_KEY_ID=$AK"
    echo "export AWS_SECRET_ACCESS_KEY=$SK"
    echo "export AWS_DEFAULT_REGION=$REGION"
    printf 'export CEPH_CONF=%q\n' "$CONF"
  } >"$DIR/s3.env.tmp"
  mv -f "$DIR/s3.env.tmp" "$DIR/s3.env"
  cat "$DIR/s3.env"
}
ours_alive() {
  local name
  for name in mon.a osd.0 rgw; do running "$(pid_of "$DIR/pids/$name.pid")" || return 1; done
}

# ---- already up? -------------------------------------------------------------------------------
if [ -f "$DIR/s3.env" ] && grep -q "STOREKIT_TEST_S3_ENDPOINT=$ENDPOINT\$" "$DIR/s3.env" &&
  ours_alive && s3 -o /dev/null "$ENDPOINT/"; then
  svc_log "already running in $DIR ($ENDPOINT)"
  write_env
  exit 0
fi
if compgen -G "$DIR/pids/*.pid" >/dev/null; then
  svc_log "stale instance in $DIR: tearing it down"
  "$SERVICES_HERE/ceph-down.sh" >&2 || true
fi
case $DIR in / | /tmp | /root | /home | /usr | /var | /etc | "$REPO_ROOT") die "refusing to use $DIR as the runtime dir" ;; esac
# only ever wipe a directory that we made (it has our ceph.conf) or an empty one
if [ -n "$(ls -A "$DIR" 2>/dev/null)" ] && [ ! -f "$CONF" ]; then die "refusing to wipe non-empty $DIR (not ours)"; fi
for p in "$MON_PORT" "$RGW_PORT"; do
  port_in_use "$p" && die "port $p on 127.0.0.1 is in use (another Ceph?); set CEPH_MON_PORT / RGW_PORT"
done
rm -rf "$DIR"
mkdir -p "$DIR"/{pids,log,mon.a,osd.0,rgw,crash}
# admin sockets are unix sockets (path limit 107 bytes): fall back to a short dir for deep repos
RUN=$DIR/run
if [ ${#RUN} -gt 60 ]; then RUN=/tmp/storekit-ceph-$(echo "$DIR" | md5sum | cut -c1-12); fi
rm -rf "$RUN"
mkdir -p "$RUN"
[ "$RUN" = "$DIR/run" ] || ln -s "$RUN" "$DIR/run"

FSID=$(cat /proc/sys/kernel/random/uuid)
cat >"$CONF" <<EOF
# written by storekit scripts/services/ceph-up.sh: throw-away single-node test cluster
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$MON_PORT
mon initial members = a
public network = 127.0.0.0/8
ms bind ipv6 = false
ms bind msgr1 = false
ms bind msgr2 = true
# no cephx between the daemons of this throw-away cluster; S3 requests are still signed and checked
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
mon warn on insecure global id reclaim allowed = false
run dir = $RUN
admin socket = $RUN/\$name.asok
log file = $DIR/log/\$name.log
crash dir = $DIR/crash
keyring = $DIR/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 1
osd pool default pgp num = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mgr initial modules =

[client]
# CLI calls (ceph, radosgw-admin) are short-lived clients: no admin socket for them
admin socket =

[mon]
mon data = $DIR/mon.\$id
mon cluster log file = $DIR/log/cluster.log
# commit map changes every 50 ms instead of every second: each pool RGW creates is an osdmap epoch
paxos propose interval = 0.05
paxos min wait = 0.01

[osd]
osd data = $DIR/osd.\$id
osd objectstore = $STORE
osd memory target = 939524096
osd class update on start = false
osd crush update on start = true
# not \$osd_data/block: bluestore symlinks that name to the block path itself (ELOOP)
bluestore block path = $DIR/osd.\$id.block
bluestore block create = true
bluestore block size = $((SIZE_GB * 1024 * 1024 * 1024))
bluestore fsck on mount = false
bluestore fsck on mkfs = false
bluestore cache autotune = false
bluestore cache size = 268435456
memstore device bytes = $((SIZE_GB * 1024 * 1024 * 1024))

[client.rgw]
admin socket = $RUN/\$name.asok
# radosgw asks for a secure, cephx-authenticated mon session by default, which never
# succeeds with auth none ("get_initial_auth_request returned -13")
ms mon client mode = crc
auth client required = none
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw data = $DIR/rgw
rgw thread pool size = 64
rgw enable usage log = false
rgw dns name = localhost
rgw rados pool pg num min = 1
# deleted objects' data is only freed by garbage collection (default: after 2 h)
rgw gc obj min wait = 30
rgw gc processor period = 30
EOF

# start NAME CMD...: run a daemon in the foreground (-f) in its own session; record its pid
start() {
  local name=$1
  shift
  setsid "$@" -f </dev/null >"$DIR/log/$name.out" 2>&1 &
  echo $! >"$DIR/pids/$name.pid"
}
# a dead mon makes every ceph CLI call hang: never call it without a timeout
cephcli() { timeout --foreground "${CLI_TIMEOUT:-15}" ceph "$@"; }

# ---- mon ---------------------------------------------------------------------------------------
# ceph-mon --mkfs refuses a non-empty data dir, so the keyring and monmap live beside it
ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$DIR/monmap" >/dev/null
ceph-mon --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring" >"$DIR/log/mon-mkfs.out" 2>&1 ||
  die "ceph-mon --mkfs failed"
start mon.a ceph-mon -i a
for _ in $(seq 100); do
  running "$(pid_of "$DIR/pids/mon.a.pid")" || die "ceph-mon exited"
  CLI_TIMEOUT=3 cephcli mon stat >/dev/null 2>&1 && break
  sleep 0.1
done
cephcli mon stat >/dev/null 2>&1 || die "ceph-mon does not answer on port $MON_PORT"
svc_log "mon up on port $MON_PORT (pid $(pid_of "$DIR/pids/mon.a.pid"))"

# ---- osd ---------------------------------------------------------------------------------------
OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
OSD_ID=$(cephcli osd new "$OSD_UUID" 2>"$DIR/log/osd-new.out") || die "ceph osd new failed"
[ "$OSD_ID" = 0 ] || die "expected osd id 0, got $OSD_ID"
timeout --foreground 120 ceph-osd -i 0 --mkfs --osd-uuid "$OSD_UUID" >"$DIR/log/osd-mkfs.out" 2>&1 || die "ceph-osd --mkfs failed"
start osd.0 ceph-osd -i 0
svc_log "osd mkfs done ($STORE), osd started (pid $(pid_of "$DIR/pids/osd.0.pid"))"

# ---- rgw user: radosgw-admin creates the default zone, zonegroup and pools; it does not need
# the gateway, so it runs while the OSD boots. api_name us-east-1 lets clients send that
# region as LocationConstraint (the zonegroup only exists after the first user create).
timeout --foreground 90 radosgw-admin -n client.rgw user create --uid storekit-test --display-name "storekit tests" \
  --access-key "$AK" --secret-key "$SK" >"$DIR/log/user-create.out" 2>&1 || die "radosgw-admin user create failed"
timeout --foreground 60 radosgw-admin -n client.rgw zonegroup modify --rgw-zonegroup=default --api-name="$REGION" \
  >"$DIR/log/zonegroup.out" 2>&1 || die "radosgw-admin zonegroup modify failed"
svc_log "S3 user created"
for _ in $(seq 600); do
  running "$(pid_of "$DIR/pids/osd.0.pid")" || die "ceph-osd exited"
  CLI_TIMEOUT=5 cephcli osd dump 2>/dev/null | grep -q '^osd.0 up' && break
  sleep 0.1
done
cephcli osd dump 2>/dev/null | grep -q '^osd.0 up' || die "osd.0 is not up"
svc_log "osd up"

# ---- rgw ---------------------------------------------------------------------------------------
start rgw radosgw -n client.rgw
for _ in $(seq 600); do
  curl -fsS --max-time 2 -o /dev/null "$ENDPOINT/" 2>/dev/null && break
  running "$(pid_of "$DIR/pids/rgw.pid")" || die "radosgw exited"
  sleep 0.1
done
curl -fsS --max-time 5 -o /dev/null "$ENDPOINT/" || die "radosgw does not answer on $ENDPOINT"
svc_log "rgw answering on $ENDPOINT (pid $(pid_of "$DIR/pids/rgw.pid"))"

# ---- smoke test: signed bucket create, PUT, GET, DELETE (also creates the index and data pools,
# so the first test does not pay for them)
B=$ENDPOINT/storekit-smoke-$$
for _ in $(seq 50); do s3 -X PUT -o /dev/null "$B" 2>/dev/null && break; sleep 0.2; done
echo "smoke $FSID" >"$DIR/smoke.txt"
s3 -o /dev/null -T "$DIR/smoke.txt" "$B/obj" || die "smoke PUT failed"
[ "$(s3 "$B/obj")" = "smoke $FSID" ] || die "smoke GET returned other bytes"
s3 -o /dev/null -X DELETE "$B/obj" && s3 -o /dev/null -X DELETE "$B" || die "smoke DELETE failed"
svc_log "S3 smoke PUT/GET/DELETE ok; env in $DIR/s3.env"
write_env
