package cli

// extraCommands lists the node-side commands (node, group, status). Each lives in
// its own file; add one line here per command.
func extraCommands() []Command {
	return []Command{
		nodeCommand(),
		groupCommand(),
		statusCommand(),
	}
}
