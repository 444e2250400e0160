package main

func Undocumented() {}

func main() {}
