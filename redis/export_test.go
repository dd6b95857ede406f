package redis

// SetOnGroup sets the hook the leader of an unheld publish group calls
// with the group's size, on every node of b.
func SetOnGroup(b *Bus, fn func(n int)) {
	for _, n := range b.nodes {
		n.unheld.mu.Lock()
		n.unheld.onGroup = fn
		n.unheld.mu.Unlock()
	}
}

// QueuedUnheld is how many unheld publishes wait for a group on the node
// of sessionID.
func QueuedUnheld(b *Bus, sessionID string) int {
	n := b.pick(sessionID)
	n.unheld.mu.Lock()
	defer n.unheld.mu.Unlock()
	return len(n.unheld.queue)
}
