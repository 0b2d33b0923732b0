// Package filesystem is the generated Go code of envd's filesystem service
// (filesystem.proto; regenerate with ../generate.sh or `make envd-proto`).
package filesystem
