package agent

// WaitShellProbe waits until s knows whether plain commands may skip the shell, so that
// a test's commands take the same path every run.
func WaitShellProbe(s *Server) { <-s.probeDone }
