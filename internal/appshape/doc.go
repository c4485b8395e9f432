// Package appshape is what one Gradio app looks like across Gradio
// generations, for a front door that serves replicas of several
// generations as one Gradio 5 app: the shape of a config that callers
// depend on ([Shape], [Fingerprint]: two replicas with one shape serve one
// app), the component ids two configs of one app number otherwise
// ([IDMaps]), an older /info in Gradio 5's shape ([PresentInfo]), and
// Gradio 3's file dicts as Gradio 5's FileData ([WSArgs], [WSOutputFiles]).
//
// Every function is pure: it reads configs and JSON and returns new JSON,
// never doing I/O. Apart from the front door so that the front door is
// about serving calls and this about formats, each tested on recorded
// servers' configs and /info (testdata).
package appshape
