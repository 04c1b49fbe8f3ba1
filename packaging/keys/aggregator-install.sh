  # The aggregator's CURVE key is made here, once per host, never shipped in the package (every install
  # must have its own secret). Readable by the service group only; agents and clients get the .pub.
  if [ ! -e /etc/netprism/aggregator.key ]; then
    (umask 077 && /usr/bin/netprism keygen --out /etc/netprism/aggregator >/dev/null)
    chgrp @USER@ /etc/netprism/aggregator.key
    chmod 0640 /etc/netprism/aggregator.key
  fi
  # Empty allowlists (no agent, no client admitted) until the operator adds keys (docs/deploy.md, "Keys").
  [ -e /etc/netprism/agents ] || printf '# NODE PUBKEY: one line per agent key (see docs/deploy.md, "Keys")\n' >/etc/netprism/agents
  [ -e /etc/netprism/clients ] || printf '# read|admin PUBKEY: one line per query client key\n' >/etc/netprism/clients
