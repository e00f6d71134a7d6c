#!/bin/sh
echo "hello from ci-project"
