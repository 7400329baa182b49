"""SSH endpoints for the rehearsal cluster's nodes: pitstop's `ssh.*` modules run against
simulated nodes exactly as against real ones (strict host keys, key auth, SFTP).

Start it
--------
- `pitstop sim serve` (on by default; `--no-ssh` to turn off, `--ssh-user` to change the user).
- In-process: `SimCluster(SimConfig(ssh=True, kubeconfig=tmp / "kubeconfig"))`.

Each node listens on its own 127.0.0.1 port with its own ed25519 host key (new at every
start) and lets in one user (`ssh_user`, default `ops`) with one client key. Files written
next to the kubeconfig (or in `SimConfig.ssh_dir`; a temporary directory if neither):

  known_hosts            `[127.0.0.1]:PORT ssh-ed25519 AAAA...` per node
  secrets/sim-ssh-key    the client key (kept across restarts): the secret `{secret: sim-ssh-key}`
                         for a worker with `PITSTOP_SECRETS_DIR=<dir>/secrets`
  inventory.yaml         `cluster:` (kubeconfig, ssh user/key/known_hosts) and every node with
                         ansible_host, ansible_port, failure_domain, node_name; group `gpu`
                         and one group per failure domain (`zone_a`, ...)

`SimCluster` API: `ssh_port(node)`, `known_hosts_path`, `client_key_path`, `ssh_secrets_dir`,
`inventory_path`, `ssh_info(node) -> SshEndpointInfo`, `set_ssh_faults(node, SshNodeFaults)`,
`ssh_endpoints` (the `SshEndpoints`; `.host(node).fs` is the node's file system).
Admin: `GET/POST /_sim/nodes/{node}/ssh`. Scenario: `faults.ssh: {node: SshNodeFaults}` and
`timing.firmware_flash_seconds` (simulated seconds, default 30).

What a node answers (exactly the protocol in `activities/ssh.py` / `pitstop.ssh.protocol`)
---------------------------------------------------------------------------------------
  cat /proc/sys/kernel/random/boot_id   the node's boot id (the Kubernetes node's nodeInfo.bootID)
  uname [-r|-n|-s|-m|-a], hostname, cat /etc/os-release, cat /etc/hostname   from the profile
  nvidia-smi --query-gpu=index,name,driver_version,vbios_version,memory.total,uuid,pci.bus_id
      --format=csv[,noheader][,nounits]; nvidia-smi -L      one row per GPU of the profile
      (product, driver, VBIOS = the ACTIVE firmware); not found (127) on a node without GPUs
  pitstop-fwupdate --current | --pending | --apply IMAGE
      the image's version is its first line `FIRMWARE <version>` (else `firmware-<v>.img`);
      --apply runs for `flash_seconds` (simulated), is counted in `firmware_flashes`, then
      stages the version for the next boot (pending); it becomes current and the node label
      `pitstop.dev/firmware-version` changes only when the node reboots
  pitstop's apply script (marker with `pid=$$`, log, exit status; `protocol.parse_apply`):
      the shell's pid stays alive (`test -d /proc/PID`) until the updater ends, even if the
      connection drops or the worker dies; a reboot kills it (nothing staged, no status)
  reboot | systemctl reboot | shutdown -r now
      answers 0, then the simulator reboots the node: connections drop, the port refuses
      connections while the node is NotReady, and it comes back with a new boot id when the
      node is Ready again (never, for `faults.nodes_never_return`)
  apt-get install|remove|purge, apt-mark, dpkg-query -W   the node's packages (the dpkg view);
      a driver or kernel takes effect at the next reboot, removing the running kernel is refused
  update-grub (GRUB_DEFAULT from /etc/default/grub and grub.d/*.cfg); a reboot boots GRUB's
      kernel (uname -r follows it); the driver loads only when the booted kernel has its headers
      or prebuilt modules, else nvidia-smi fails (exit 9) with the driver's real message
  nv-fabricmanager --version, systemctl is-active|status nvidia-fabricmanager   Fabric Manager on
      NVSwitch nodes (scenario `nvswitch`), active only at the loaded driver's exact version
  kubeadm version|upgrade plan|apply|node, kubelet --version, containerd --version, ofed_info -s
  sudo -n [-u USER] -- CMD, timeout [-k N] SECONDS CMD (exit 124), sh -c '...', cd DIR && ...
  coreutils on an in-memory file system (kept across reboots except /tmp): cat, test/[,
  sha256sum, stat -c, mkdir [-p], rm [-rf], rmdir, mv, cp, chmod, chown, touch, ls, tail -c/-n,
  echo (with > / >>), sleep, true, false, whoami, id; scripts on the node (ssh.script)
  anything else: exit 127, `sh: 1: NAME: not found` on stderr
  SFTP: open/read/write, stat, chmod, mkdir, rmdir, remove, rename, posix-rename, listdir

Permissions are not simulated: the SSH user may write anywhere, and `sudo -n` never asks
for a password. Faults (`SshNodeFaults`): `drops` (the connection closes while a matching
command runs; the command itself carries on), `flash_seconds`, `flash_fails` (exit 3).
"""

from pitstop_sim.ssh.models import SshDrop, SshEndpointInfo, SshNodeFaults

__all__ = ["SshDrop", "SshEndpointInfo", "SshNodeFaults"]
