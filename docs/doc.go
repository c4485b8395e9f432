// Package docs holds gradiopool's documentation (the Markdown files of this
// directory); it has no code. Its test checks that every relative link and
// anchor of README.md, CHANGELOG.md and docs/*.md leads somewhere.
package docs
