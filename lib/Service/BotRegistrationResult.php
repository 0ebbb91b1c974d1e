<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * BotRegistrationResult says whether Talk now knows the bot, and in words why not.
 */
final class BotRegistrationResult {
	public function __construct(
		public readonly bool $registered,
		public readonly string $message,
	) {
	}
}
