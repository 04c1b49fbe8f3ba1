    rm -f /etc/netprism/aggregator.key /etc/netprism/aggregator.pub /etc/netprism/agents /etc/netprism/clients
