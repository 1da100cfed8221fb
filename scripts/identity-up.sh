#!/usr/bin/env bash
# Identities for Allot's test Slurm (called by slurm-up.sh; see docs/slurm.md, "Identity").
#
# 1. Unix accounts: the service account ALLOT_SERVICE_USER (allot) that Allot's worker would run
#    as, and the researchers' accounts ALLOT_TEST_USERS (allot-alice allot-bob allot-carol allot-dave), members of the
#    group ALLOT_JOB_GROUP (allot-jobs). Jobs run as these, never as allot or root.
# 2. The sudoers rule Allot submits through, in /etc/sudoers.d/allot: the service account may run
#    sbatch, scancel and the job forms of scontrol as a member of allot-jobs, nothing else, with
#    no password and sudo's reset environment. Checked with visudo before it is installed.
# 3. An sshd on 127.0.0.1:SSH_PORT (2222), key-only, for testing command_prefix=ssh: the key is
#    SLURM_STATE_DIR/ssh/id_ed25519 (root-only) and lets root and allot in. It does not touch
#    /root/.ssh or the system's sshd.
#
# Idempotent; needs root. Installs sudo and openssh-server with apt-get when missing.
set -euo pipefail
STATE=${SLURM_STATE_DIR:-/var/lib/allot-slurm}
SSH_PORT=${SSH_PORT:-2222}
SERVICE_USER=${ALLOT_SERVICE_USER:-allot}
JOB_GROUP=${ALLOT_JOB_GROUP:-allot-jobs}
TEST_USERS=${ALLOT_TEST_USERS:-allot-alice allot-bob allot-carol allot-dave}
MARK="# written by Allot scripts/identity-up.sh"
SUDOERS=/etc/sudoers.d/allot

need=()
command -v sudo >/dev/null || need+=(sudo)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# 1. accounts. '*' rather than useradd's locked '!': sshd refuses a locked account even with a key.
getent group "$JOB_GROUP" >/dev/null || groupadd --system "$JOB_GROUP"
id -u "$SERVICE_USER" >/dev/null 2>&1 \
  || useradd --system --create-home --shell /bin/bash "$SERVICE_USER"
usermod -p '*' "$SERVICE_USER"
for user in $TEST_USERS; do
  id -u "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
  usermod -a -G "$JOB_GROUP" "$user"
done

# 2. the sudoers rule (written only when it changed, validated before it is moved in)
if [ -f "$SUDOERS" ] && ! grep -qxF "$MARK" "$SUDOERS"; then
  echo "identity-up: $SUDOERS was not written by this script; refusing to overwrite it" >&2
  exit 1
fi
bin() { command -v "$1" || echo "/usr/bin/$1"; }
install -d -m 0755 "$STATE"
cat > "$STATE/sudoers.new" <<RULE
$MARK
# Allot's worker ($SERVICE_USER) submits and stops jobs as their owner: only members of
# $JOB_GROUP, only the Slurm job commands, with sudo's reset environment.
Cmnd_Alias ALLOT_SLURM_JOBS = $(bin sbatch), $(bin scancel), \\
    $(bin scontrol) update jobid=*, $(bin scontrol) requeuehold *, $(bin scontrol) release *
Defaults:$SERVICE_USER env_reset, !requiretty
$SERVICE_USER ALL=(%$JOB_GROUP) NOPASSWD: ALLOT_SLURM_JOBS
RULE
visudo -q -c -f "$STATE/sudoers.new" >/dev/null
if cmp -s "$STATE/sudoers.new" "$SUDOERS"; then
  rm -f "$STATE/sudoers.new"
else
  install -m 0440 -o root -g root "$STATE/sudoers.new" "$SUDOERS"
  rm -f "$STATE/sudoers.new"
fi

# 3. sshd on loopback, its own keys and configuration under $STATE/ssh
SSH=$STATE/ssh
install -d -m 0755 "$SSH" "$SSH/authorized"   # sshd reads authorized/%u as that user
install -d -m 0755 /run/sshd "$STATE/run"
[ -s "$SSH/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C allot-test-host -f "$SSH/host_ed25519"
[ -s "$SSH/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C allot-test -f "$SSH/id_ed25519"
for user in root "$SERVICE_USER"; do
  install -m 0644 "$SSH/id_ed25519.pub" "$SSH/authorized/$user"
done
cat > "$SSH/sshd_config.new" <<CONF
$MARK
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $SSH/host_ed25519
PidFile $STATE/run/sshd.pid
AuthorizedKeysFile $SSH/authorized/%u
AllowUsers root $SERVICE_USER
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
X11Forwarding no
AllowTcpForwarding no
PermitUserEnvironment no
AcceptEnv none
CONF
/usr/sbin/sshd -t -f "$SSH/sshd_config.new"
restart=0
cmp -s "$SSH/sshd_config.new" "$SSH/sshd_config" || restart=1
mv "$SSH/sshd_config.new" "$SSH/sshd_config"
pid_file=$STATE/run/sshd.pid
if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
  if [ "$restart" = 1 ]; then kill "$(cat "$pid_file")"; sleep 0.2; else exit 0; fi
fi
/usr/sbin/sshd -f "$SSH/sshd_config" 9>&-
for _ in $(seq 1 50); do [ -s "$pid_file" ] && break; sleep 0.1; done
ssh -i "$SSH/id_ed25519" -p "$SSH_PORT" -o BatchMode=yes -o StrictHostKeyChecking=no \
  -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR root@127.0.0.1 true
