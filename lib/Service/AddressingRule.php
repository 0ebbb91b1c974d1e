<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * AddressingRule is the app's own guess whether a message is meant for the bot, used
 * only when the sidecar cannot say so itself (it is unreachable). It mirrors the
 * sidecar's default rule: everything in a private conversation, and elsewhere messages
 * that start with "!" or name the bot as "@<bot name>".
 */
class AddressingRule {
	public function isAddressed(string $eventType, string $text, bool $privateConversation, string $botName): bool {
		// Only chat messages get the 👀 reaction; system messages and Join/Leave never do.
		if ($eventType !== 'Create') {
			return false;
		}
		if ($privateConversation) {
			return true;
		}
		if (str_starts_with(ltrim($text), '!')) {
			return true;
		}
		if ($botName === '') {
			return false;
		}
		// "@Istota" anywhere, case-insensitive, but not as the start of a longer word.
		$pattern = '/(?<![\p{L}\p{N}_])@' . preg_quote($botName, '/') . '(?![\p{L}\p{N}_])/iu';
		return preg_match($pattern, $text) === 1;
	}
}
