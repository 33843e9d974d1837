#!/bin/bash

echo "heads or tails" > coin.txt
