"""Driving the playbooks through ansible-runner and reading the fleet state they leave."""
