<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Model;

/** In-memory: the installed bots. */
class BotServerMapper {
	/** @param list<BotServer> $bots */
	public function __construct(
		public array $bots = [],
	) {
	}

	public function findByUrl(string $url): BotServer {
		foreach ($this->bots as $bot) {
			if ($bot->getUrl() === $url) {
				return $bot;
			}
		}
		throw new \RuntimeException('DoesNotExistException: no bot with this URL');
	}
}
