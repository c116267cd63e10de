package main

import "context"

func runENOSPC(ctx context.Context, e *env) (string, error)  { return "", nil }
func runEMFILE(ctx context.Context, e *env) (string, error)  { return "", nil }
func runHostile(ctx context.Context, e *env) (string, error) { return "", nil }
