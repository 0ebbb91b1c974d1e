/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
import { describe, expect, it } from 'vitest'
import { formatCost, formatDuration, formatTime, formatTokens } from '../../src/util/format.js'

describe('formatDuration', () => {
	const cases = [
		[null, '–'],
		[undefined, '–'],
		[-5, '–'],
		[850, '850 ms'],
		[12_000, '12 s'],
		[185_000, '3 min 5 s'],
		[3_720_000, '1 h 2 min'],
	]
	for (const [ms, want] of cases) {
		it(`${ms} → ${want}`, () => {
			expect(formatDuration(ms)).toBe(want)
		})
	}
})

describe('formatTokens and formatCost', () => {
	it('sums and splits tokens with grouping', () => {
		expect(formatTokens(1200, 340)).toBe('1,540 tokens (1,200 in, 340 out)')
		expect(formatTokens(1, 0)).toBe('1 token (1 in, 0 out)')
	})
	it('shows small costs with enough digits', () => {
		expect(formatCost(0.0123)).toBe('$0.0123')
		expect(formatCost(0)).toBe('$0.00')
	})
})

describe('formatTime', () => {
	it('a dash for unknown or bad times', () => {
		expect(formatTime('')).toBe('–')
		expect(formatTime(null)).toBe('–')
		expect(formatTime('not a time')).toBe('–')
	})
	it('uses the given zone, and survives an unknown one', () => {
		const berlin = formatTime('2026-11-27T16:00:00Z', 'Europe/Berlin')
		expect(berlin).toContain('5:00')
		expect(formatTime('2026-11-27T16:00:00Z', 'Mars/Olympus')).not.toBe('–')
	})
})
