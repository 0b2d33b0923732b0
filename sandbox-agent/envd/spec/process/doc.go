// Package process is the generated Go code of envd's process service
// (process.proto; regenerate with ../generate.sh or `make envd-proto`).
package process
