package store

import "errors"

var errNotADecision = errors.New("tmp")
