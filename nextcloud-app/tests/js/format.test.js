/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
import { describe, expect, it } from 'vitest'
import { formatAttempt, formatConversation, formatCost, formatDuration, formatRetry, formatTime, formatTokens } from '../../src/util/format.js'

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

describe('formatRetry and formatAttempt', () => {
	it('names the next attempt and its time in the given zone while a task waits', () => {
		const waiting = { status: 'pending', attempts: 1, max_attempts: 4, retry_at: '2026-11-24T15:30:00Z' }
		const got = formatRetry(waiting, 'Europe/Berlin')
		expect(got).toContain('attempt 2 of 4')
		expect(got).toContain('4:30')
		expect(got).toMatch(/^Waiting to retry at /)
	})
	it('says nothing of a task that is not waiting to retry', () => {
		expect(formatRetry({ status: 'pending', attempts: 0, max_attempts: 4, retry_at: '' })).toBe('')
		expect(formatRetry(null)).toBe('')
	})
	it('names a running retry, not a first attempt', () => {
		expect(formatAttempt({ status: 'running', attempts: 2, max_attempts: 4 })).toBe('Attempt 2 of 4')
		expect(formatAttempt({ status: 'running', attempts: 1, max_attempts: 4 })).toBe('')
		expect(formatAttempt(null)).toBe('')
	})
})

describe('formatConversation', () => {
	it('names a one-to-one conversation by the other participant', () => {
		expect(formatConversation('["alice","bob"]', 'alice')).toBe('Conversation with bob')
		expect(formatConversation('["alice","bob"]', 'bob')).toBe('Conversation with alice')
		expect(formatConversation('["alice","bob"]', '')).toBe('Conversation with alice, bob')
	})
	it('keeps every other name as Talk gave it', () => {
		for (const name of ['Team', 'Note to self', '[draft] plans', '42', '[]', '["a", 1]', '{"a":"b"}']) {
			expect(formatConversation(name, 'alice')).toBe(name)
		}
	})
})
