package plugins_test

import (
	"errors"
	"fmt"
	"strings"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func joined(s []string) string { return strings.Join(s, " ") }
