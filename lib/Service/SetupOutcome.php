<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * SetupOutcome is the result of `occ istota:setup`: the sidecar's configuration, what
 * happened to the bot account and whether Talk knows the bot.
 */
final class SetupOutcome {
	public function __construct(
		public readonly SidecarConfig $config,
		public readonly BotRegistrationResult $registration,
		public readonly BotAccountResult $account,
	) {
	}
}
