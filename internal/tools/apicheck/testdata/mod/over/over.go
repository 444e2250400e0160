// Package over exports one name more than the default budget of 60.
package over

// C0 is a constant.
const C0 = 0

// C1 is a constant.
const C1 = 1

// C2 is a constant.
const C2 = 2

// C3 is a constant.
const C3 = 3

// C4 is a constant.
const C4 = 4

// C5 is a constant.
const C5 = 5

// C6 is a constant.
const C6 = 6

// C7 is a constant.
const C7 = 7

// C8 is a constant.
const C8 = 8

// C9 is a constant.
const C9 = 9

// C10 is a constant.
const C10 = 10

// C11 is a constant.
const C11 = 11

// C12 is a constant.
const C12 = 12

// C13 is a constant.
const C13 = 13

// C14 is a constant.
const C14 = 14

// C15 is a constant.
const C15 = 15

// C16 is a constant.
const C16 = 16

// C17 is a constant.
const C17 = 17

// C18 is a constant.
const C18 = 18

// C19 is a constant.
const C19 = 19

// C20 is a constant.
const C20 = 20

// C21 is a constant.
const C21 = 21

// C22 is a constant.
const C22 = 22

// C23 is a constant.
const C23 = 23

// C24 is a constant.
const C24 = 24

// C25 is a constant.
const C25 = 25

// C26 is a constant.
const C26 = 26

// C27 is a constant.
const C27 = 27

// C28 is a constant.
const C28 = 28

// C29 is a constant.
const C29 = 29

// C30 is a constant.
const C30 = 30

// C31 is a constant.
const C31 = 31

// C32 is a constant.
const C32 = 32

// C33 is a constant.
const C33 = 33

// C34 is a constant.
const C34 = 34

// C35 is a constant.
const C35 = 35

// C36 is a constant.
const C36 = 36

// C37 is a constant.
const C37 = 37

// C38 is a constant.
const C38 = 38

// C39 is a constant.
const C39 = 39

// C40 is a constant.
const C40 = 40

// C41 is a constant.
const C41 = 41

// C42 is a constant.
const C42 = 42

// C43 is a constant.
const C43 = 43

// C44 is a constant.
const C44 = 44

// C45 is a constant.
const C45 = 45

// C46 is a constant.
const C46 = 46

// C47 is a constant.
const C47 = 47

// C48 is a constant.
const C48 = 48

// C49 is a constant.
const C49 = 49

// C50 is a constant.
const C50 = 50

// C51 is a constant.
const C51 = 51

// C52 is a constant.
const C52 = 52

// C53 is a constant.
const C53 = 53

// C54 is a constant.
const C54 = 54

// C55 is a constant.
const C55 = 55

// C56 is a constant.
const C56 = 56

// C57 is a constant.
const C57 = 57

// C58 is a constant.
const C58 = 58

// C59 is a constant.
const C59 = 59

// C60 is a constant.
const C60 = 60
