package printable

import "strings"

// MarkdownText is s as inline text in a line of Markdown (a run's note:
// MLflow's description, W&B's notes), after other text on its line:
// Markdown's escaping (a cell's), and each character that would start
// emphasis, code, a link, an image or a strike-through (* _ ` [ ] ! ~)
// escaped with a backslash, so that the text shows as it was written.
func MarkdownText(s string) string {
	s = Markdown(s)
	if !strings.ContainsAny(s, "*_`[]!~") {
		return s
	}
	return textReplacer.Replace(s)
}

var textReplacer = strings.NewReplacer("*", `\*`, "_", `\_`, "`", "\\`", "[", `\[`, "]", `\]`, "!", `\!`, "~", `\~`)
